#!/usr/bin/env bash
# Data-parallel training check (ktstream.training.distributed): a short DKT run on a simulated stream,
# each rank printing its best epoch, valid AUC and a checksum of its final weights (equal on every rank).
#   bash bench/ddp_check.sh          # NCCL on one GPU (torchrun, world size 1), then gloo on 2 CPU processes
#   bash bench/ddp_check.sh gloo     # gloo only (no GPU needed)
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
if [[ "${1:-nccl}" == "nccl" ]]; then
  python -c "import torch.distributed as d; assert d.is_nccl_available(), 'this torch has no NCCL'; print('nccl available')"
  torchrun --standalone --nproc_per_node=1 -m ktstream.training.distributed --cuda
fi
OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=2 -m ktstream.training.distributed
