/* Every PCG32 stream key of the programs in one place, so that no two uses
 * share a stream by accident: pcg32_keyed(seed, KEY, a, b) for the keyed
 * ones (core/rng/pcg32.h), pcg32_seed(seed, KEY) for the plain ones.  The
 * values are ASCII tags; they are part of what a config means (the same
 * keys give the same initialisation, data order and routing), so they
 * never change. */
#ifndef MODE_CORE_RNG_STREAMS_H
#define MODE_CORE_RNG_STREAMS_H

#define PCG_KEY_INIT 0x494e4954u      /* "INIT": tensor t's initialisation (t, 0) */
#define PCG_KEY_DATA 0x44415441u      /* "DATA": a training sample's offset (step, sequence) */
#define PCG_KEY_ROUTING 0x524e4400u   /* "RND\0" + layer: random routing scores (step, sequence) */
#define PCG_KEY_MOE_RANDOM 0x4d520000u /* "MR" + layer: random expert scores (step, sequence) */
#define PCG_KEY_HASH 0x48520000u      /* "HR" + layer: hash routing's experts (token, 0) */
#define PCG_KEY_COUNTERFACTUAL 0x43460000u /* "CF" + layer: counterfactual draws (window, 0) */
#define PCG_KEY_DROP 0x44520000u      /* "DR" + layer: stochastic depth's draws (step, unit) */
#define PCG_KEY_UPCYCLE 0x55500000u /* "UP" + what: upcycling's draws (layer or tensor, expert) */
#define PCG_KEY_BENCH 0x42454e43u     /* "BENC": mode-exp bench's tokens (step, rank) */
#define PCG_KEY_MI 0x4d49u            /* "MI": the analysis's chance mutual information */
#define PCG_KEY_BOOT 0x424f4f54u      /* "BOOT": the analysis's bootstraps (what, 0) */
#define PCG_STREAM_SAMPLE 0x53414d50u /* "SAMP": mode-exp sample's draws */
#define PCG_KEY_SAMPLE_LANE 0x534c4e00u /* "SLN": sample --batch's lane i > 0 draws (lane, 0) */
#define PCG_STREAM_SYNTH 0x53594e54u  /* "SYNT": the synthetic corpus's generator */

#endif
