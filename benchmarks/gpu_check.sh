#!/usr/bin/env bash
# The checks of the device-token path on a real GPU, in one go (a machine with a CUDA
# device, Open MPI's mpirun and mpi4py; run from the repository's root):
#
#     OUT=benchmarks/results/gpu bash benchmarks/gpu_check.sh
#
# 1. the device tokens' step and sum against the host's arithmetic, bit for bit
#    (tests/test_device_tokens.py: its CUDA cases are skipped where no GPU is visible);
# 2. whole runs under mpirun -n 4, the ranks sharing the GPU: tokens on the GPU against
#    tokens on the host and the simulator, record for record
#    (tests/in_rank/test_device_tokens_mpi.py);
# 3. the same short run on the CPU and on the GPU (the simulator, digits): how far their
#    records are apart (float32; the GPU's kernels are not the CPU's) -> gpu_agreement.json;
# 4. bench_networks --device both --quick: where a round's time goes on each, LeNet and
#    VGG-11, 2 and 4 ranks -> bench_networks_quick.{csv,json,png}.
# Every step runs even if one before it failed; what each printed is in $OUT/gpu_*.txt.
# benchmarks/README.md, "On a GPU", says what came out where.
set -u
OUT=${OUT:-benchmarks/results/gpu}
PY=${PYTHON:-python3}
MPIRUN=$(dirname "$(command -v "$PY")")/mpirun  # the launcher beside the interpreter (its venv's MPI)
[[ -x $MPIRUN ]] || MPIRUN=mpirun
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    nproc
    $PY -c "import torch, numpy, mpi4py; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0)); print('numpy', numpy.__version__, 'mpi4py', mpi4py.__version__)"
    $PY -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"
    echo "$MPIRUN"; "$MPIRUN" --version | head -1
} > "$OUT/gpu_device.txt" 2>&1
cat "$OUT/gpu_device.txt"

echo "== 1. step and sum on the GPU against the host's arithmetic"
$PY -m pytest -q -p no:cacheprovider -o addopts= -rs tests/test_device_tokens.py > "$OUT/gpu_unit.txt" 2>&1
tail -3 "$OUT/gpu_unit.txt"

echo "== 2. mpirun -n 4 sharing the GPU: device tokens = host tokens = simulator"
timeout 400 "$MPIRUN" --oversubscribe --bind-to none -n 4 $PY -m mpi4py -m pytest -p no:cacheprovider \
    --with-mpi -q -s -rs -o addopts= --timeout=300 tests/in_rank/test_device_tokens_mpi.py > "$OUT/gpu_in_rank.txt" 2>&1
echo "mpirun status $?" >> "$OUT/gpu_in_rank.txt"
grep -aE "passed|failed|error|status|GPU \{" "$OUT/gpu_in_rank.txt" | tail -8
echo "== 2b. the same with cuBLAS made deterministic (CUBLAS_WORKSPACE_CONFIG=:4096:8)"
CUBLAS_WORKSPACE_CONFIG=:4096:8 timeout 400 "$MPIRUN" --oversubscribe --bind-to none -x CUBLAS_WORKSPACE_CONFIG -n 4 \
    $PY -m mpi4py -m pytest -p no:cacheprovider --with-mpi -q -s -rs -o addopts= --timeout=300 \
    tests/in_rank/test_device_tokens_mpi.py -k cuda >> "$OUT/gpu_in_rank.txt" 2>&1
echo "mpirun status $? (CUBLAS_WORKSPACE_CONFIG=:4096:8)" >> "$OUT/gpu_in_rank.txt"
grep -aE "passed|failed|status|GPU \{" "$OUT/gpu_in_rank.txt" | tail -8

echo "== 3. the same run on the CPU and on the GPU"
for d in cpu cuda; do
    $PY -m mpi_teleport.sim --problem digits --algorithm teleportation --nodes 8 --k 3 --rounds 60 --log-every 20 --lr 0.05 \
        --momentum 0.9 --device "$d" --progress off --out "$work/agree_$d" > "$work/agree_$d.txt" 2>&1 \
        || tail -5 "$work/agree_$d.txt"
done
$PY - "$work" "$OUT/gpu_agreement.json" <<'EOF'
import json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
runs = {d: [json.loads(line) for line in (work / f"agree_{d}" / "metrics.jsonl").read_text().splitlines()]
        for d in ("cpu", "cuda")}
rows = []
for a, b in zip(runs["cpu"], runs["cuda"]):
    row = {"round": a["round"]}
    for key in ("loss", "accuracy", "consensus", "train_loss", "train_accuracy"):
        if isinstance(a.get(key), (int, float)) and isinstance(b.get(key), (int, float)):
            row[key] = {"cpu": a[key], "cuda": b[key], "difference": b[key] - a[key]}
    rows.append(row)
out.write_text(json.dumps({"what": "simulator, digits, n=8, k=3, 60 rounds, lr 0.05, momentum 0.9: "
                                   "the same run on the CPU and on the GPU", "rows": rows}, indent=1))
print(json.dumps(rows[-1]))
EOF

echo "== 4. bench_networks on the GPU and its CPU"
timeout 480 $PY benchmarks/bench_networks.py --device "${BENCH_DEVICE:-both}" --quick --ranks 2 4 --models lenet vgg \
    --out "$OUT" > "$OUT/gpu_bench_networks.txt" 2>&1
echo "bench_networks status $?" >> "$OUT/gpu_bench_networks.txt"
tail -25 "$OUT/gpu_bench_networks.txt"
rm -rf "$work"
