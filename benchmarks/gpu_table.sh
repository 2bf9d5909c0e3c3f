#!/bin/bash
# A reproduction table on a lent GPU machine: one `fedjax-rl reproduce --jobs N` runs every piece the
# request still lacks (each row's programs, split by --piece-seeds when ARGS gives it) as N processes
# side by side on the one GPU, each pinned to its share of the host's cores, with one log per piece
# in OUTDIR/logs/. A Table 2 program is a launch-bound loop of small kernels, so programs running side
# by side fill the GPU better than one after another. It ran Table 1 at the paper's full budget (the
# defaults); TABLE, BUDGET, ROWS (comma-separated) and JOBS choose others, e.g. Table 2 at 5% of the
# paper's steps (the MuJoCo tasks step on the host's cores with the C engine, the default):
#   TABLE=table2 BUDGET=0.05 JOBS=12 ROWS="Hopper-v4/torso,Hopper-v4/thigh" benchmarks/gpu_table.sh start
# or the attacks table's Acrobot-v1 rows at 30% (at 10% their honest Minimum sits at the floor, -500, on most
# seeds, leaving an attack nothing to take; ROWS takes a wildcard):
#   TABLE=attacks BUDGET=0.3 ROWS='Acrobot-v1/*' benchmarks/gpu_table.sh start
#
# The machine has no package index and its image has jax 0.11.2 with CUDA, flax, optax and chex; the
# rest travels as Python 3.12 wheels in .whl/ (git-ignored). Make them here, where pip works:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 \
#     mujoco-mjx==3.17.0 trimesh==5.2.0 gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6 \
#     flashbax==0.1.3 glfw==2.11.0 pyopengl==3.1.10
# and carry .whl with the call. Run from the repository root there (a call there lasts at most 10
# minutes, so the command runs in the background and later calls look at it):
#   benchmarks/gpu_table.sh start          # the one reproduce --jobs command, in the background
#   benchmarks/gpu_table.sh wait SECONDS   # print its progress until it ends or SECONDS pass
#   benchmarks/gpu_table.sh collect        # tar the results (no checkpoints) to $OUT
# ARGS adds reproduce's own flags (e.g. ARGS="--seeds 4 --tuning-seeds 2 --omegas 0.05,0.1 --piece-seeds 2").
# FROM=DIR starts from a committed results directory (e.g. results/table2_5pct_h200): its finished rows
# and pieces are read back, not run again. The same command resumes after the machine is given back,
# from the pieces that finished (a checkpoint is too large to bring back, so unfinished pieces start over).
set -u
TABLE=${TABLE:-table1}
BUDGET=${BUDGET:-paper}
ARGS=${ARGS:-}
JOBS=${JOBS:-8}
OUTDIR=/tmp/gpu_${TABLE}_${BUDGET}
ROWS=${ROWS:-"LunarLander-v3/gravity,LunarLander-v3/wind,MountainCar-v0/gravity,MountainCar-v0/force,\
Acrobot-v1/gravity,Acrobot-v1/length,CartPole-v1/length,CartPole-v1/masscart"}

if [ ! -d /tmp/site/gymnax ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg

case "${1:-}" in
start)
  nvidia-smi -L
  python3 -c "import jax, flax, optax, chex, gymnax, flashbax, mujoco; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'chex', chex.__version__, 'mujoco', mujoco.__version__, jax.devices())" || exit 1
  mkdir -p $OUTDIR
  [ -n "${FROM:-}" ] && cp -rn "$FROM"/. $OUTDIR/
  # The one command: every missing piece, JOBS at a time; then the rows and the table, in the same process.
  setsid nohup python3 -m fedjax_rl.cli reproduce $TABLE --budget $BUDGET $ARGS --rows "$ROWS" --out $OUTDIR \
    --jobs $JOBS > $OUTDIR/reproduce.log 2>&1 < /dev/null &
  echo $! > $OUTDIR/reproduce.pid
  echo "started at $(date): $OUTDIR/reproduce.log"
  ;;
wait)
  deadline=$(( $(date +%s) + ${2:-60} ))
  while [ "$(date +%s)" -lt $deadline ] && kill -0 "$(cat $OUTDIR/reproduce.pid)" 2>/dev/null; do sleep 20; done
  date; tail -n 30 $OUTDIR/reproduce.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv; uptime
  ;;
collect)
  kill -0 "$(cat $OUTDIR/reproduce.pid)" 2>/dev/null && echo "still running: the archive holds the pieces finished so far"
  # Checkpoints (replay buffers: GBs for a Table 2 program) and parameter files are too large to come back.
  find $OUTDIR -size +3M | sed "s#^/tmp/##" > /tmp/too_large
  tar czf "$OUT/gpu_${TABLE}_${BUDGET}.tar.gz" --exclude='*.npz' -X /tmp/too_large -C /tmp "$(basename $OUTDIR)"
  ls -la "$OUT"
  ;;
*) echo "usage: $0 start | wait SECONDS | collect"; exit 2 ;;
esac
