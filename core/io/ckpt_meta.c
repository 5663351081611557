#include "core/io/ckpt_meta.h"

#include <stdlib.h>
#include <string.h>

void ckpt_meta_clear(ckpt_meta *meta)
{
    free(meta->config);
    free(meta->data);
    memset(meta, 0, sizeof(*meta));
}
