# shellcheck shell=bash
# peers_env.sh - the environment of one peer installed by install_peers.sh;
# source it (in a subshell, or a script):
#
#   source bench/peers/peers_env.sh impi|ompi5|mpich5|ccl
#
# Puts the venv's bin first in PATH and its lib in LD_LIBRARY_PATH; sets
# peer_dir (the venv) and peer_launcher (its mpirun or mpiexec). impi and
# ccl: I_MPI_ROOT (Intel MPI's mpicc reads its prefix from it) and
# I_MPI_FABRICS=shm (no libfabric: see install_peers.sh); its bin first in
# PATH is also what makes its mpirun start its own hydra_pmi_proxy, not
# another one found in PATH (Debian's MPICH). ccl runs over Intel MPI
# (CCL_ATL_TRANSPORT=mpi): both venvs' bin and lib. ompi5: running as root
# allowed.
peers_root=${SHARC_PEERS_DIR:-$HOME/.cache/sharc/peers}
peer_name=${1:?usage: source peers_env.sh impi|ompi5|mpich5|ccl}
case $peer_name in
  impi | ompi5 | mpich5 | ccl) ;;
  *)
    echo "peers_env: unknown peer '$peer_name' (impi, ompi5, mpich5, ccl)" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
peer_dir=$peers_root/$peer_name
if [ ! -d "$peer_dir/lib" ]; then
  echo "peers_env: $peer_dir is not installed: bench/peers/install_peers.sh --only $peer_name" >&2
  return 2 2>/dev/null || exit 2
fi
case $peer_name in
  impi | ccl)
    export I_MPI_ROOT=$peers_root/impi I_MPI_FABRICS=shm
    export PATH=$I_MPI_ROOT/bin:$PATH
    export LD_LIBRARY_PATH=$I_MPI_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    peer_launcher=$I_MPI_ROOT/bin/mpirun
    if [ "$peer_name" = ccl ]; then
      [ -d "$I_MPI_ROOT/lib" ] || {
        echo "peers_env: oneCCL runs over Intel MPI: bench/peers/install_peers.sh --only impi" >&2
        return 2 2>/dev/null || exit 2
      }
      export LD_LIBRARY_PATH=$peer_dir/lib:$LD_LIBRARY_PATH
      export CCL_ATL_TRANSPORT=${CCL_ATL_TRANSPORT:-mpi}
    fi
    ;;
  ompi5)
    export PATH=$peer_dir/bin:$PATH
    export LD_LIBRARY_PATH=$peer_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    peer_launcher=$peer_dir/bin/mpirun
    ;;
  mpich5)
    export PATH=$peer_dir/bin:$PATH
    export LD_LIBRARY_PATH=$peer_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    peer_launcher=$peer_dir/bin/mpiexec
    ;;
esac
