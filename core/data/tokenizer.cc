// SentencePiece behind tokenizer.h (the one C++ file of the project).
#include "core/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

extern "C" {
#include "core/util/file.h"
}

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
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

/* A model from its serialized bytes; name is the file for messages. */
static int from_model(tokenizer **out, const char *model, size_t n, const char *name, char *err,
                      int err_len)
{
    tokenizer *t = new (std::nothrow) tokenizer;
    if (!t)
        return -ENOMEM;
    auto st = t->sp.LoadFromSerializedProto(std::string_view(model, n));
    if (!st.ok()) {
        std::snprintf(err, (size_t)err_len, "tokenizer %s: not a SentencePiece model (%s)", name,
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
                      "mode-exp tokenize does): text would not round-trip", name);
        delete t;
        return -EINVAL;
    }
    *out = t;
    return 0;
}

/* The C face never lets an exception out: SentencePiece and the standard
 * library throw (std::bad_alloc, std::ios_base::failure), and one thrown
 * through a C caller ends the process with SIGABRT. */
#define CATCH_AT_C_BOUNDARY(err, err_len, where)                                                   \
    catch (const std::bad_alloc &) {                                                              \
        std::snprintf(err, (size_t)(err_len), "%s: out of memory", where);                         \
        return -ENOMEM;                                                                           \
    }                                                                                             \
    catch (const std::exception &e) {                                                             \
        std::snprintf(err, (size_t)(err_len), "%s: %s", where, e.what());                          \
        return -EIO;                                                                              \
    }                                                                                             \
    catch (...) {                                                                                 \
        std::snprintf(err, (size_t)(err_len), "%s: an unknown C++ exception", where);              \
        return -EIO;                                                                              \
    }

extern "C" int tokenizer_load(tokenizer **out, const char *path, char *err, int err_len)
{
    *out = nullptr;
    /* the bytes through the one checked open (core/util/file.h): a folder or
     * a FIFO is refused at once, never handed to the library's own open */
    char *model = nullptr, why[600];
    size_t n = 0;
    int rc = file_read_all(path, &model, &n, why, sizeof(why));
    if (rc) {
        std::snprintf(err, (size_t)err_len, "tokenizer %s", why);
        return rc;
    }
    std::unique_ptr<char, void (*)(void *)> hold(model, std::free);
    try {
        return from_model(out, model, n, path, err, err_len);
    }
    CATCH_AT_C_BOUNDARY(err, err_len, path)
}

extern "C" int tokenizer_from_model(tokenizer **out, const void *model, size_t n,
                                    const char *name, char *err, int err_len)
{
    *out = nullptr;
    try {
        return from_model(out, (const char *)model, n, name, err, err_len);
    }
    CATCH_AT_C_BOUNDARY(err, err_len, name)
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

static int encode(const tokenizer *t, const char *text, size_t n, int32_t **ids, long *n_ids,
                  char *err, int err_len)
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

extern "C" int tokenizer_encode(const tokenizer *t, const char *text, size_t n, int32_t **ids,
                                long *n_ids, char *err, int err_len)
{
    *ids = nullptr;
    *n_ids = 0;
    try {
        return encode(t, text, n, ids, n_ids, err, err_len);
    }
    CATCH_AT_C_BOUNDARY(err, err_len, "encoding")
}

static char *decode(const tokenizer *t, const int32_t *ids, long n, size_t *len)
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

extern "C" char *tokenizer_decode(const tokenizer *t, const int32_t *ids, long n, size_t *len)
{
    try {
        return decode(t, ids, n, len);
    } catch (...) {
        return nullptr;
    }
}

/* text's lines, as SentencePiece reads a text file (one sentence a line,
 * without its newline): the text is read by the caller through the checked
 * open, so no path reaches the library */
class lines_of : public sentencepiece::SentenceIterator {
  public:
    lines_of(const char *text, size_t n) : text_(text), n_(n) { Next(); }
    bool done() const override { return done_; }
    void Next() override
    {
        if (at_ > n_ || (at_ == n_ && (n_ == 0 || text_[n_ - 1] == '\n'))) {
            done_ = true;
            return;
        }
        const void *nl = std::memchr(text_ + at_, '\n', n_ - at_);
        size_t end = nl ? (size_t)((const char *)nl - text_) : n_;
        line_.assign(text_ + at_, end - at_);
        at_ = end + 1;
    }
    const std::string &value() const override { return line_; }
    sentencepiece::util::Status status() const override { return {}; }

  private:
    const char *text_;
    size_t n_, at_ = 0;
    bool done_ = false;
    std::string line_;
};

static int train_model(const char *text, size_t n, int vocab, const char *type, int threads,
                 char **model, size_t *model_len, char *err, int err_len)
{
    /* the options as a map, never a flag string the library splits on ' '
     * and ',' (where a path with either would become other paths) */
    std::unordered_map<std::string, std::string> kw = {
        { "vocab_size", std::to_string(vocab) },
        { "model_type", type },
        { "character_coverage", "1.0" },
        { "byte_fallback", "true" },
        { "normalization_rule_name", "identity" },
        { "remove_extra_whitespaces", "false" },
        { "add_dummy_prefix", "false" },
        { "max_sentence_length", "65536" },
        { "minloglevel", "2" },
        { "num_threads", std::to_string(threads) },
    };
    lines_of it(text, n);
    std::string proto;
    auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &proto);
    if (!st.ok()) {
        std::snprintf(err, (size_t)err_len, "%s", st.ToString().c_str());
        return -EINVAL;
    }
    *model = (char *)std::malloc(proto.size() ? proto.size() : 1);
    if (!*model)
        return -ENOMEM;
    std::memcpy(*model, proto.data(), proto.size());
    *model_len = proto.size();
    return 0;
}

extern "C" int tokenizer_train(const char *text, size_t n, int vocab, const char *type,
                               int threads, char **model, size_t *model_len, char *err,
                               int err_len)
{
    *model = nullptr;
    *model_len = 0;
    try {
        return train_model(text, n, vocab, type, threads, model, model_len, err, err_len);
    }
    CATCH_AT_C_BOUNDARY(err, err_len, "training the tokenizer")
}

extern "C" char *tokenizer_vocab_listing(const tokenizer *t, size_t *len)
{
    try {
        std::string out;
        for (int i = 0; i < t->sp.GetPieceSize(); i++) {
            char score[32];
            std::snprintf(score, sizeof(score), "%g", (double)t->sp.GetScore(i));
            out += t->sp.IdToPiece(i) + "\t" + score + "\n";
        }
        char *c = (char *)std::malloc(out.size() + 1);
        if (!c)
            return nullptr;
        std::memcpy(c, out.data(), out.size() + 1);
        *len = out.size();
        return c;
    } catch (...) {
        return nullptr;
    }
}
