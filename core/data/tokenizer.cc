// SentencePiece behind tokenizer.h (the one C++ file of the project).
#include "core/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    std::vector<int> bytes; // per id
    int newline;            // the id of <0x0A>
};

static int piece_bytes(const sentencepiece::SentencePieceProcessor &sp, int id)
{
    if (sp.IsControl(id) || sp.IsUnknown(id))
        return 0;
    if (sp.IsByte(id))
        return 1;
    const std::string &p = sp.IdToPiece(id);
    int n = 0;
    for (size_t i = 0; i < p.size();) {
        if (p.compare(i, 3, "\xe2\x96\x81") == 0) { // U+2581: a space
            n += 1;
            i += 3;
        } else {
            n += 1;
            i += 1;
        }
    }
    return n;
}

extern "C" int tokenizer_load(tokenizer **out, const char *path, char *err, int err_len)
{
    *out = nullptr;
    FILE *f = std::fopen(path, "rb");
    if (!f) {
        std::snprintf(err, (size_t)err_len, "tokenizer %s: %s", path, std::strerror(errno));
        return -ENOENT;
    }
    std::fclose(f);
    tokenizer *t = new (std::nothrow) tokenizer;
    if (!t)
        return -ENOMEM;
    auto st = t->sp.Load(path);
    if (!st.ok()) {
        std::snprintf(err, (size_t)err_len, "tokenizer %s: not a SentencePiece model (%s)", path,
                      st.ToString().c_str());
        delete t;
        return -EINVAL;
    }
    int V = t->sp.GetPieceSize();
    t->bytes.resize((size_t)V);
    for (int i = 0; i < V; i++)
        t->bytes[(size_t)i] = piece_bytes(t->sp, i);
    t->newline = t->sp.PieceToId("<0x0A>");
    if (t->newline == t->sp.unk_id() || !t->sp.IsByte(t->newline)) {
        std::snprintf(err, (size_t)err_len,
                      "tokenizer %s: has no byte pieces (train it with byte_fallback, as "
                      "mode-exp tokenize does): text would not round-trip", path);
        delete t;
        return -EINVAL;
    }
    *out = t;
    return 0;
}

extern "C" void tokenizer_free(tokenizer **t)
{
    delete *t;
    *t = nullptr;
}

extern "C" int tokenizer_vocab(const tokenizer *t)
{
    return t->sp.GetPieceSize();
}

extern "C" int tokenizer_piece_bytes(const tokenizer *t, int id)
{
    return id >= 0 && (size_t)id < t->bytes.size() ? t->bytes[(size_t)id] : 0;
}

extern "C" int tokenizer_encode(const tokenizer *t, const char *text, size_t n, int32_t **ids,
                                long *n_ids, char *err, int err_len)
{
    std::vector<int32_t> all;
    std::vector<int> line;
    size_t at = 0;
    while (at <= n) {
        const void *nl = at < n ? std::memchr(text + at, '\n', n - at) : nullptr;
        size_t end = nl ? (size_t)((const char *)nl - text) : n;
        if (end > at) {
            auto st = t->sp.Encode(std::string(text + at, end - at), &line);
            if (!st.ok()) {
                std::snprintf(err, (size_t)err_len, "encoding: %s", st.ToString().c_str());
                return -EINVAL;
            }
            all.insert(all.end(), line.begin(), line.end());
        }
        if (!nl)
            break;
        all.push_back(t->newline);
        at = end + 1;
    }
    *ids = (int32_t *)std::malloc((all.size() ? all.size() : 1) * sizeof(int32_t));
    if (!*ids)
        return -ENOMEM;
    std::memcpy(*ids, all.data(), all.size() * sizeof(int32_t));
    *n_ids = (long)all.size();
    return 0;
}

extern "C" char *tokenizer_decode(const tokenizer *t, const int32_t *ids, long n, size_t *len)
{
    std::string out;
    std::vector<int> run;
    for (long i = 0; i <= n; i++) {
        if (i < n && ids[i] != t->newline && ids[i] >= 0 && ids[i] < tokenizer_vocab(t)) {
            run.push_back(ids[i]);
            continue;
        }
        if (!run.empty()) {
            std::string s;
            if (!t->sp.Decode(run, &s).ok())
                return nullptr;
            /* a run that opens with the space mark keeps its space (the
             * library drops a leading one as a dummy prefix would be) */
            if (t->sp.IdToPiece(run[0]).compare(0, 3, "\xe2\x96\x81") == 0 &&
                (s.empty() || s[0] != ' '))
                s.insert(s.begin(), ' ');
            out += s;
            run.clear();
        }
        if (i < n && ids[i] == t->newline)
            out += '\n';
    }
    char *c = (char *)std::malloc(out.size() + 1);
    if (!c)
        return nullptr;
    std::memcpy(c, out.data(), out.size());
    c[out.size()] = '\0';
    if (len)
        *len = out.size();
    return c;
}

extern "C" int tokenizer_train(const char *input, const char *prefix, int vocab, const char *type,
                               int threads, char *err, int err_len)
{
    std::string args = std::string("--input=") + input + " --model_prefix=" + prefix +
                       " --vocab_size=" + std::to_string(vocab) + " --model_type=" + type +
                       " --character_coverage=1.0 --byte_fallback=true"
                       " --normalization_rule_name=identity --remove_extra_whitespaces=false"
                       " --add_dummy_prefix=false --max_sentence_length=65536"
                       " --minloglevel=2 --num_threads=" + std::to_string(threads);
    auto st = sentencepiece::SentencePieceTrainer::Train(args);
    if (!st.ok()) {
        std::snprintf(err, (size_t)err_len, "training the tokenizer on %s: %s", input,
                      st.ToString().c_str());
        return -EINVAL;
    }
    return 0;
}
