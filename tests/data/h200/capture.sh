#!/usr/bin/env bash
# The H200 captures of tests/data/h200, as they were made: run from the repository root on the GPU
# machine, with cupti-python 13.4.0's wheels in .whl/a (cupti-python, nvidia-cuda-cupti 13.4.92,
# pyelftools, cuda-pathfinder). Writes OUT/h200_captures.tar.gz (after each step) and prints the log.
set -u
OUT=${1:?usage: capture.sh OUT}
H=tests/data/h200
RAW=/tmp/h200raw
rm -rf "$RAW" && mkdir -p "$RAW" "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
log() { echo "== $(date +%T) $*"; }
pack() { tar czf "$OUT/h200_captures.tar.gz" -C "$RAW" . ; }

log environment
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import sys, torch, jax, cupy; print(sys.version); print('torch', torch.__version__, torch.version.cuda); print('jax', jax.__version__, jax.devices()); print('cupy', cupy.__version__)"
python3 -m pip list 2>/dev/null | grep -i -E "cupti|cuda-bindings|cuda-pathfinder|protobuf|nvtx"

log cupti-python 13.4.0
SITE=/tmp/site_a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .whl/a/*.whl
# cuda-pathfinder finds the image's libcupti 13.0.85 first: activity records work with it, PM sampling does
# not ("could not load the nvperf* libraries"); with cupti-python's own libcupti 13.4.92 loaded first, both do.
LIB=$SITE/nvidia/cu13/lib
log "probe: the image's libcupti"
timeout 90 env PYTHONPATH="$SITE:$PWD" python3 $H/probe_cupti.py 2>&1 | cut -c1-300
log "probe: cupti-python's libcupti 13.4.92"
CUPTI_ENV=(env LD_LIBRARY_PATH="$LIB" LD_PRELOAD="$LIB/libcupti.so.13" PYTHONPATH="$SITE:$PWD")
timeout 90 "${CUPTI_ENV[@]}" python3 $H/probe_cupti.py 2>&1 | cut -c1-300

log "jax (XLA's defaults: the step runs as a command buffer)"
timeout 150 python3 $H/workload_jax.py --out "$RAW/jax" 2>&1 | tail -5; pack
log "jax without command buffers (each fusion's kernels under its own name)"
timeout 150 env XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 $H/workload_jax.py --out "$RAW/jax_nocb" 2>&1 | tail -5; pack
log kineto eager
timeout 120 python3 $H/workload_torch.py --kineto "$RAW/kineto" 2>&1 | tail -3; pack
log kineto graph
timeout 120 python3 $H/workload_torch.py --graph --kineto "$RAW/kineto" 2>&1 | tail -3; pack
log cupti eager
timeout 120 "${CUPTI_ENV[@]}" python3 -m xprosql.cli record --no-ingest --raw-dir "$RAW/cupti" -- $H/workload_torch.py 2>&1 | tail -3; pack
log cupti graph
timeout 120 "${CUPTI_ENV[@]}" python3 -m xprosql.cli record --no-ingest --raw-dir "$RAW/cupti_graph" -- $H/workload_torch.py --graph 2>&1 | tail -3; pack
log cupti eager with PM sampling
timeout 120 "${CUPTI_ENV[@]}" python3 -m xprosql.cli record --no-ingest --raw-dir "$RAW/cupti_pm" \
    --metrics sm__cycles_active.avg,dram__throughput.avg.pct_of_peak_sustained_elapsed -- $H/workload_torch.py 2>&1 | tail -3; pack
log pytest live
timeout 150 "${CUPTI_ENV[@]}" python3 -m pytest --noconftest -p no:cacheprovider -q -rA tests/test_cupti.py -k live 2>&1 | tail -8
log files
find "$RAW" -type f -printf "%10s %p\n" | sort -k2
pack
log done
