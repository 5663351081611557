/* libFuzzer target: the config reader on arbitrary text, with arbitrary
 * overrides (the text after a line "--" is split into overrides). */
#include "core/config/config.h"
#include "moe/registry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *over[8];
    int n_over = 0;
    char *sep = strstr(text, "\n--\n");
    if (sep) {
        *sep = '\0';
        for (char *tok = strtok(sep + 4, "\n"); tok && n_over < 8; tok = strtok(NULL, "\n"))
            over[n_over++] = tok;
    }
    run_config c;
    char err[512];
    int ranks = size > 0 ? data[0] % 9 : 0;
    if (config_load_string(&c, text, "fuzz.ini", n_over, over, &mode_schema, ranks, err,
                           sizeof(err)) == 0) {
        /* what loads must write back to what loads the same */
        char *ini = config_to_ini(&c);
        run_config again;
        if (!ini || config_load_string(&again, ini, "again.ini", 0, NULL, &mode_schema, ranks, err,
                                       sizeof(err)) != 0)
            abort();
        free(ini);
    }
    free(text);
    return 0;
}
