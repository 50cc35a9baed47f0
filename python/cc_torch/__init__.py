"""cc as a torch.distributed backend.

    import cc_torch                      # registers the backend "cc"
    torch.distributed.init_process_group("cc")

Works under torchrun (env://), with an explicit store or init_method, and under mpirun
or srun: there cc_torch fills in RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from
the launcher's environment when they are not set. MASTER_ADDR and MASTER_PORT name the
rendezvous; when every rank is on one host they default to 127.0.0.1 and a port derived
from the launcher's job id (the same on every rank). docs/TORCH.md says what is
supported.
"""
import os
import zlib

import torch.distributed as dist

from ._C import ProcessGroupCC, cc_version

__all__ = ["ProcessGroupCC", "cc_version"]

# Where each launcher says who this process is: (rank, size, local rank, local size).
_LAUNCHERS = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
]


def _fill_from_launcher():
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    for rank, size, local_rank, local_size in _LAUNCHERS:
        if rank in os.environ and size in os.environ:
            os.environ.setdefault("RANK", os.environ[rank])
            os.environ.setdefault("WORLD_SIZE", os.environ[size])
            if local_rank in os.environ:
                os.environ.setdefault("LOCAL_RANK", os.environ[local_rank])
            if local_size in os.environ and os.environ[local_size].isdigit():
                os.environ.setdefault("LOCAL_WORLD_SIZE", os.environ[local_size])
            # Every rank on one host: the rendezvous is on this host.
            if os.environ.get("LOCAL_WORLD_SIZE") == os.environ["WORLD_SIZE"]:
                os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
                job = _job_id()
                if job:
                    os.environ.setdefault("MASTER_PORT", str(20000 + zlib.crc32(job.encode()) % 20000))
            return


def _job_id():
    for name in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"):
        if os.environ.get(name):
            return name + os.environ[name] + os.environ.get("SLURM_STEP_ID", "")
    return None


def _create(store, rank, size, timeout):
    return ProcessGroupCC(store, rank, size, timeout)


_fill_from_launcher()
if not hasattr(dist.Backend, "CC"):
    dist.Backend.register_backend("cc", _create)
