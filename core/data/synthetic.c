/* The synthetic corpus: byte text whose tokens differ, by construction, in
 * how much work it takes to predict them, with a per-token label saying
 * which.  A model that spends its compute unevenly should learn to spend it
 * on the hard and medium tokens and let the easy ones skip the block.
 *
 * The text is a sequence of documents of a few hundred bytes:
 *
 *   @K=q;B=x;T=m;|+fghijklm ~abcabcabcabc #7 3=0 5=5 9=4 2=6 ?B=x K=q T=m B=x \n
 *
 *   header   '@', then 4..10 definitions "K=v;" (K an upper-case key, distinct
 *            within the document; v a random lower-case value), then '|'.
 *   body     10..20 segments, each ending in ' ', of four kinds:
 *     run    '+', a random letter, then the next 7 letters of the alphabet
 *            (wrapping z -> a).
 *     repeat '~', 3 random letters, then those 3 letters repeated 3 times.
 *     sum    '#', a start digit s, ' ', then 4 items "d=s " where d is a
 *            random digit and s = (previous s + d) mod 10: a running sum.
 *     query  '?', then 4 items "K=v " where K is one of the document's keys
 *            and v is the value its definition gave it.
 *            The first SYNTH_NO_QUERY body segments are never queries, so a
 *            query is always more than ~40 bytes after the definitions.
 *   '\n' ends the document.
 *
 * Labels: the difficulty of predicting THAT token from its prefix.
 *   filler  drawn at random by the generator: keys and values in the header,
 *           the byte after each ';' (another key or the '|'), segment markers
 *           and the '\n' (the segment kind and count are random), the start
 *           letter of a run, the 3 letters of a repeat, the digits d and the
 *           start digit of a sum, the keys of a query.  Nothing predicts them
 *           beyond their distribution, however much compute is spent.
 *   easy    fixed by the last few bytes: '=' after a key, ';' after a value,
 *           '@' after '\n', the letters of a run after its first (previous
 *           byte + 1), the repeated letters of a repeat (the byte 3 back),
 *           and the ' ' and '=' of the fixed-length segment formats.
 *   medium  a sum s: needs the previous sum (4 bytes back) plus the digit
 *           just read, mod 10; local, but a computation rather than a copy.
 *   hard    a query value v: fixed only by the definition "K=v;" in the
 *           header, tens to hundreds of bytes back; it can only be predicted
 *           by recalling it (induction-head style key-value retrieval).
 *
 * Deterministic from the seed on every machine: one PCG32 stream and only
 * integer draws (pcg32_bounded), no floating point.  A document is generated
 * whole into a small buffer and copied out, so the last one is cut at n. */
#include "core/data/data.h"

#include "core/rng/pcg32.h"

#include <string.h>

const char *const synthetic_label_names[SYNTH_CLASSES] = {
    [SYNTH_EASY] = "easy", [SYNTH_MEDIUM] = "medium", [SYNTH_HARD] = "hard",
    [SYNTH_FILLER] = "filler",
};

#define SYNTH_STREAM PCG_STREAM_SYNTH /* the PCG stream of the generator */
#define SYNTH_MIN_DEFS 4
#define SYNTH_MAX_DEFS 10
#define SYNTH_MIN_SEGMENTS 10
#define SYNTH_MAX_SEGMENTS 20
#define SYNTH_NO_QUERY 4    /* leading body segments that are never queries */
#define SYNTH_RUN_LEN 8     /* letters in a run */
#define SYNTH_PERIOD 3      /* period of a repeat */
#define SYNTH_REPEATS 4     /* copies of the pattern, the first included */
#define SYNTH_ITEMS 4       /* items in a sum or a query */
/* The longest document: header + every segment at its longest (a sum is
 * 3 + 4*4 bytes, a query 1 + 4*4) + '\n', with room to spare. */
#define SYNTH_DOC_MAX (2 + 4 * SYNTH_MAX_DEFS + SYNTH_MAX_SEGMENTS * 24 + 8)

typedef struct doc_writer {
    uint8_t bytes[SYNTH_DOC_MAX];
    uint8_t labels[SYNTH_DOC_MAX];
    int len;
} doc_writer;

static void put(doc_writer *w, int byte, int label)
{
    w->bytes[w->len] = (uint8_t)byte;
    w->labels[w->len] = (uint8_t)label;
    w->len++;
}

/* Segment kinds, drawn with these weights (sum and query weigh more so that
 * medium and hard tokens are not rare). */
enum { SEG_RUN, SEG_REPEAT, SEG_SUM, SEG_QUERY };
static const uint32_t seg_weight[4] = { 2, 2, 3, 4 };

static void generate_document(doc_writer *w, pcg32 *rng)
{
    uint8_t key[SYNTH_MAX_DEFS], value[SYNTH_MAX_DEFS];
    w->len = 0;

    /* Header: distinct keys by a partial Fisher-Yates shuffle of A..Z. */
    uint8_t alphabet[26];
    for (int i = 0; i < 26; i++)
        alphabet[i] = (uint8_t)('A' + i);
    int n_defs = SYNTH_MIN_DEFS + (int)pcg32_bounded(rng, SYNTH_MAX_DEFS - SYNTH_MIN_DEFS + 1);
    put(w, '@', SYNTH_EASY); /* forced after '\n' (or the very first byte) */
    for (int k = 0; k < n_defs; k++) {
        int j = k + (int)pcg32_bounded(rng, (uint32_t)(26 - k));
        uint8_t t = alphabet[k];
        alphabet[k] = alphabet[j];
        alphabet[j] = t;
        key[k] = alphabet[k];
        value[k] = (uint8_t)('a' + pcg32_bounded(rng, 26));
        put(w, key[k], SYNTH_FILLER);
        put(w, '=', SYNTH_EASY);
        put(w, value[k], SYNTH_FILLER);
        put(w, ';', SYNTH_EASY);
    }
    put(w, '|', SYNTH_FILLER); /* the definition count was random */

    int n_segments = SYNTH_MIN_SEGMENTS
                     + (int)pcg32_bounded(rng, SYNTH_MAX_SEGMENTS - SYNTH_MIN_SEGMENTS + 1);
    for (int s = 0; s < n_segments; s++) {
        int kind;
        if (s < SYNTH_NO_QUERY) {
            kind = (int)pcg32_bounded(rng, 3); /* run, repeat or sum */
        } else {
            uint32_t r = pcg32_bounded(rng, seg_weight[0] + seg_weight[1] + seg_weight[2]
                                                + seg_weight[3]);
            kind = 0;
            while (r >= seg_weight[kind])
                r -= seg_weight[kind++];
        }
        switch (kind) {
        case SEG_RUN: {
            int c = (int)pcg32_bounded(rng, 26);
            put(w, '+', SYNTH_FILLER);
            put(w, 'a' + c, SYNTH_FILLER);
            for (int i = 1; i < SYNTH_RUN_LEN; i++)
                put(w, 'a' + (c + i) % 26, SYNTH_EASY);
            break;
        }
        case SEG_REPEAT: {
            put(w, '~', SYNTH_FILLER);
            for (int i = 0; i < SYNTH_PERIOD; i++)
                put(w, 'a' + (int)pcg32_bounded(rng, 26), SYNTH_FILLER);
            for (int i = SYNTH_PERIOD; i < SYNTH_PERIOD * SYNTH_REPEATS; i++)
                put(w, w->bytes[w->len - SYNTH_PERIOD], SYNTH_EASY);
            break;
        }
        case SEG_SUM: {
            int sum = (int)pcg32_bounded(rng, 10);
            put(w, '#', SYNTH_FILLER);
            put(w, '0' + sum, SYNTH_FILLER);
            for (int i = 0; i < SYNTH_ITEMS; i++) {
                int d = (int)pcg32_bounded(rng, 10);
                sum = (sum + d) % 10;
                put(w, ' ', SYNTH_EASY);
                put(w, '0' + d, SYNTH_FILLER);
                put(w, '=', SYNTH_EASY);
                put(w, '0' + sum, SYNTH_MEDIUM);
            }
            break;
        }
        default: { /* SEG_QUERY */
            put(w, '?', SYNTH_FILLER);
            for (int i = 0; i < SYNTH_ITEMS; i++) {
                int k = (int)pcg32_bounded(rng, (uint32_t)n_defs);
                if (i > 0)
                    put(w, ' ', SYNTH_EASY);
                put(w, key[k], SYNTH_FILLER);
                put(w, '=', SYNTH_EASY);
                put(w, value[k], SYNTH_HARD);
            }
            break;
        }
        }
        /* Every segment has a fixed length once its marker is seen. */
        put(w, ' ', SYNTH_EASY);
    }
    put(w, '\n', SYNTH_FILLER); /* the segment count was random */
}

int synthetic_generate(uint8_t *tokens, uint8_t *labels, long n, uint64_t gen_seed)
{
    if (n < 0)
        return -1;
    pcg32 rng;
    pcg32_seed(&rng, gen_seed, SYNTH_STREAM);
    doc_writer w;
    long pos = 0;
    while (pos < n) {
        generate_document(&w, &rng);
        long take = n - pos < w.len ? n - pos : w.len;
        for (long i = 0; i < take; i++) {
            tokens[pos + i] = w.bytes[i];
            if (labels)
                labels[pos + i] = w.labels[i];
        }
        pos += take;
    }
    return 0;
}
