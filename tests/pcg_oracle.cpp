// Reference oracle for test_pcg32: prints raw outputs of pcg-cpp's pcg32 so
// the C implementation is checked against an independent implementation
// rather than against numbers it produced itself.
//
// usage: pcg_oracle N initstate1 initseq1 [initstate2 initseq2 ...]
// For each pair, prints N outputs of pcg32(initstate, initseq) as hex, one
// per line, pairs in the order given.
#include <pcg_random.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

// Parse a whole argument as an unsigned 64-bit number (decimal, or hex with
// 0x), refusing junk so a malformed command line fails loudly instead of
// silently seeding with 0.
static bool parse_u64(const char *s, std::uint64_t *out)
{
    if (*s == '-' || *s == '\0')
        return false;
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (errno != 0 || *end != '\0')
        return false;
    *out = static_cast<std::uint64_t>(v);
    return true;
}

int main(int argc, char **argv)
{
    std::uint64_t n = 0;
    if (argc < 4 || (argc - 2) % 2 != 0 || !parse_u64(argv[1], &n)) {
        std::fprintf(stderr,
                     "usage: %s N initstate initseq [initstate initseq ...]\n",
                     argv[0]);
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        std::uint64_t initstate = 0, initseq = 0;
        if (!parse_u64(argv[i], &initstate) || !parse_u64(argv[i + 1], &initseq)) {
            std::fprintf(stderr, "bad number in pair %s %s\n", argv[i], argv[i + 1]);
            return 2;
        }
        pcg32 r(initstate, initseq);
        for (std::uint64_t k = 0; k < n; k++)
            std::printf("%08" PRIx32 "\n", static_cast<std::uint32_t>(r()));
    }
    // Report write errors (e.g. a closed pipe) through the exit status.
    return std::fflush(stdout) == 0 && !std::ferror(stdout) ? 0 : 1;
}
