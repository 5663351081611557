#include "core/model/decision.h"

#include "core/model/kind.h"

const decision_part decision_parts[DECISION_PART_COUNT] = {
#define DECISION_PART_ROW(name, type, code, per_slot, bit)                                         \
    [DECISION_PART_##name] = { #name, code, per_slot, bit, offsetof(route_decision, name) },
    ROUTE_DECISION_PARTS(DECISION_PART_ROW)
#undef DECISION_PART_ROW
};

const void *route_decision_get(const route_decision *d, decision_part_id id)
{
    const void *const *p = (const void *const *)((const char *)d + decision_parts[id].offset);
    return *p;
}

int route_decision_record(const route_decision *d, record_sink *sink)
{
    unsigned long long dims[3] = { (unsigned long long)d->nseq, (unsigned long long)d->seq_len,
                                   (unsigned long long)d->n_slots };
    int rc = 0;
    for (int i = 0; !rc && i < DECISION_PART_COUNT; i++) {
        const void *data = route_decision_get(d, (decision_part_id)i);
        if (data)
            rc = sink->put(sink, decision_parts[i].name, decision_parts[i].type,
                           decision_parts[i].slots ? 3 : 2, dims, data);
    }
    return rc;
}
