#!/bin/bash
# A reproduction table's rows on a lent GPU machine, every row as its own process on the one GPU:
# each row's program is a launch-bound loop of small kernels, so rows running side by side fill the
# GPU better than rows one after another. It ran Table 1 at the paper's full budget (the defaults);
# TABLE, BUDGET and ROWS choose others, e.g. Table 2 at 5% of the paper's steps (the MuJoCo tasks
# step on the host's cores with the C engine, the default, fastest at these sizes on an H200):
#   TABLE=table2 BUDGET=0.05 ROWS="Hopper-v4/torso Hopper-v4/thigh" benchmarks/gpu_table.sh start
# (on an H200 with 6 such rows side by side, APART=1, a Hopper row took 13 minutes; benchmarks/README.md).
#
# The machine has no package index and its image has jax 0.11.2 with CUDA, flax, optax and chex; the
# rest travels as Python 3.12 wheels in .whl/ (git-ignored). Make them here, where pip works:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 \
#     mujoco-mjx==3.17.0 trimesh==5.2.0 gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6 \
#     flashbax==0.1.3 glfw==2.11.0 pyopengl==3.1.10
# and carry .whl with the call. Run from the repository root there:
#   benchmarks/gpu_table.sh start          # every row in the background
#   benchmarks/gpu_table.sh wait SECONDS   # print progress until the rows end or SECONDS pass
#   benchmarks/gpu_table.sh collect        # write the table, tar the results (no checkpoints) to $OUT
# ARGS adds reproduce's own flags (e.g. ARGS="--seeds 4 --tuning-seeds 2 --omegas 0.05,0.1"). APART=1
# runs every program of every row as its own process (`reproduce --program`), each pinned to
# CORES cores of the host (its MuJoCo threads follow), round robin; `collect` reads them back as rows.
# FROM=DIR starts from a committed results directory (e.g. results/table2_5pct_h200): its finished rows
# and programs are read back, not run again (programs that finished are not even started).
set -u
TABLE=${TABLE:-table1}
BUDGET=${BUDGET:-paper}
ARGS=${ARGS:-}
APART=${APART:-0}
CORES=${CORES:-4}
OUTDIR=/tmp/gpu_${TABLE}_${BUDGET}
ROWS=${ROWS:-"LunarLander-v3/gravity LunarLander-v3/wind MountainCar-v0/gravity MountainCar-v0/force
Acrobot-v1/gravity Acrobot-v1/length CartPole-v1/length CartPole-v1/masscart"}

if [ ! -d /tmp/site/gymnax ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false MPLBACKEND=Agg
REPRODUCE="python3 -m fedjax_rl.cli reproduce $TABLE"
RUNNING="reproduce $TABLE --budget $BUDGET"  # what pgrep finds while a row or program runs
PROGRAMS=$(python3 -c "from fedjax_rl import reproduce_tables as t; print(' '.join(p.name for p in t.get_table('$TABLE').programs))") || exit 1
row_log() { echo "$OUTDIR/logs/${1//\//__}${2:+__$2}.log"; }

progress() {
  for row in $ROWS; do
    for program in $([ "$APART" = 1 ] && echo $PROGRAMS || echo "-"); do
      [ "$program" = - ] && program=
      printf '%-34s %s\n' "$row $program" "$(tail -c 400 "$(row_log "$row" "$program")" 2>/dev/null | tr '\r' '\n' | grep -av '^$' | tail -1 | cut -c1-150)"
    done
  done
}

# A row is finished when its row.json exists, or (APART) when every program wrote finished.json.
finished_rows() {
  for row in $ROWS; do
    dir=$OUTDIR/$TABLE/${row//\//__}
    if [ -f "$dir/row.json" ]; then echo "$row"; continue; fi
    [ "$APART" = 1 ] || continue
    all=1; for program in $PROGRAMS; do [ -f "$dir/$program/finished.json" ] || all=0; done
    [ $all = 1 ] && echo "$row"
  done | paste -sd,
}

case "${1:-}" in
start)
  nvidia-smi -L
  python3 -c "import jax, flax, optax, chex, gymnax, flashbax, mujoco; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'chex', chex.__version__, 'mujoco', mujoco.__version__, jax.devices())" || exit 1
  mkdir -p $OUTDIR/logs
  [ -n "${FROM:-}" ] && cp -rn "$FROM"/. $OUTDIR/
  ncores=$(nproc); slot=0
  for row in $ROWS; do
    if [ "$APART" = 1 ]; then
      for program in $PROGRAMS; do
        [ -f "$OUTDIR/$TABLE/${row//\//__}/$program/finished.json" ] && continue
        first=$(( (slot * CORES) % ncores )); slot=$((slot + 1))
        setsid nohup taskset -c $first-$((first + CORES - 1)) $REPRODUCE --budget $BUDGET $ARGS --rows "$row" \
          --program $program --out $OUTDIR > "$(row_log "$row" $program)" 2>&1 < /dev/null &
      done
    else
      setsid nohup $REPRODUCE --budget $BUDGET $ARGS --rows "$row" --out $OUTDIR > "$(row_log "$row")" 2>&1 < /dev/null &
    fi
  done
  echo "started $(echo $ROWS | wc -w) rows at $(date)"
  ;;
wait)
  deadline=$(( $(date +%s) + ${2:-60} ))
  while [ "$(date +%s)" -lt $deadline ] && pgrep -f "$RUNNING" > /dev/null; do sleep 20; done
  date; progress; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv; uptime
  echo "finished rows: $(finished_rows)"
  grep -l Traceback $OUTDIR/logs/*.log 2>/dev/null | head -1 | xargs -r tail -25
  ;;
collect)
  pgrep -f "$RUNNING" > /dev/null && echo "rows still running: the table holds the finished ones"
  # Every finished row is read back, none recomputed; unfinished rows are left out of the call.
  done_rows=$(finished_rows)
  [ -n "$done_rows" ] && $REPRODUCE --budget $BUDGET $ARGS --rows "$done_rows" --out $OUTDIR --no-progress
  # Checkpoints (replay buffers: GBs for a Table 2 row) and parameter files are too large to come back.
  find $OUTDIR -size +3M | sed "s#^/tmp/##" > /tmp/too_large
  tar czf "$OUT/gpu_${TABLE}_${BUDGET}.tar.gz" --exclude='*.npz' -X /tmp/too_large -C /tmp "$(basename $OUTDIR)"
  ls -la "$OUT"
  ;;
*) echo "usage: $0 start | wait SECONDS | collect"; exit 2 ;;
esac
