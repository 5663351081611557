#!/bin/bash
# Device check: a 16-run sweep on 16 cores, runs side by side against each run on the whole world.
set -u
R=$(pwd); M=/opt/mode; mkdir -p $M; tar -xJf .dev/bundle.tar.xz -C $M || exit 1
export OPAL_PREFIX=$M/sys/usr LD_LIBRARY_PATH=$M/lib:$M/sys/usr/lib/x86_64-linux-gnu/openmpi/lib PATH=$M/sys/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mca_base_component_show_load_errors=0
export OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX
X=$M/bin/mode-exp; $X --version | head -3
for k in 1 16 4; do
  mkdir -p /tmp/k$k && cd /tmp/k$k
  t0=$(date +%s.%N)
  timeout 100 orterun -n 16 --bind-to core --map-by core $X sweep $R/docs/results/sweep-16core/sweep16.ini --ranks-per-run $k --threads 1 --no-report > $OUT/sweep-k$k.log 2>&1; rc=$?
  t1=$(date +%s.%N)
  echo "ranks-per-run $k: rc=$rc wall $(awk "BEGIN{print $t1-$t0}") s, runs done: $(ls -d out/sweep16/*/ 2>/dev/null | wc -l)"
  cd $R
done
tail -3 $OUT/sweep-k1.log
