#!/bin/bash
# Device check: data-parallel and thread scaling of the bench shape on 16 real cores.
set -u
M=/opt/mode; mkdir -p $M; tar -xJf .dev/bundle.tar.xz -C $M || exit 1
export OPAL_PREFIX=$M/sys/usr
export LD_LIBRARY_PATH=$M/lib:$M/sys/usr/lib/x86_64-linux-gnu/openmpi/lib
export PATH=$M/sys/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mca_base_component_show_load_errors=0
export OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX
X=$M/bin/mode-exp
L=$OUT/log; : > $L
{ date -u; lscpu; nproc; free -g; } > $OUT/machine.txt 2>&1
grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node\(s\)' $OUT/machine.txt
grep -o 'amx_tile\|avx512_bf16\|avx512f ' $OUT/machine.txt | sort -u | tr '\n' ' '; echo
$X --version || { ldd $X; exit 1; }
b() { # label, command...
  local lab=$1; shift
  echo "== $lab: $*" >> $L
  local t0=$(date +%s.%N)
  timeout 120 "$@" >> $L 2>&1; local rc=$?
  local t1=$(date +%s.%N)
  local line=$(grep 'ms/step' $L | tail -1)
  printf '%-22s rc=%d %6.1fs  %s\n' "$lab" $rc $(awk "BEGIN{print $t1-$t0}") "$line"
}
R="orterun --bind-to core --map-by core"
for t in 1 2 4 8 16; do b "dense 1x$t" $X bench experiments/bench/dense.ini --steps 3 --threads $t; done
for p in 2 4 8 16; do b "dense ${p}x1" $R -n $p $X bench experiments/bench/dense.ini --steps 3 --threads 1; done
b "dense 4x4" orterun -n 4 --map-by slot:PE=4 --bind-to core $X bench experiments/bench/dense.ini --steps 3 --threads 4
b "dense 8x2" orterun -n 8 --map-by slot:PE=2 --bind-to core $X bench experiments/bench/dense.ini --steps 3 --threads 2
for k in mod-12 moe staged; do
  b "$k 1x16" $X bench experiments/bench/$k.ini --steps 3 --threads 16
  b "$k 8x1" $R -n 8 $X bench experiments/bench/$k.ini --steps 3 --threads 1
  b "$k 16x1" $R -n 16 $X bench experiments/bench/$k.ini --steps 3 --threads 1
done
b "dense 1x16 bf16" $X bench experiments/bench/dense.ini --steps 3 --threads 16 run.precision=bf16
grep -E '^==|rank\(s\)|ms/step|GFLOP|per step|peak RSS|error|mode-exp:' $L > $OUT/summary.txt
