# The slurm.conf settings both local clusters share (tools/local_slurm.sh, the one-node cluster, and
# tools/local_slurm_hosts.sh, the two hosts): scheduling, memory and time limits without cgroups, no
# accounting database. Sourced by both; each writes its own names, paths, ports, nodes and partition
# around them. Example, in a script beside this file:
#
#   . "$(dirname "$0")/local_slurm_settings.sh"
#   { echo "ClusterName=example"; shared_settings; echo "PartitionName=..."; } >slurm.conf

shared_settings() { # the shared lines, on stdout
    cat <<'SETTINGS'
SlurmUser=slurm
AuthType=auth/munge
# No cgroups: processes are tracked by parent pid, tasks are not bound to CPUs.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job without --mem gets 1000 MB a CPU (not the whole node: it would run alone).
DefMemPerCPU=1000
SchedulerType=sched/backfill
# No slurmdbd: sacct has no jobs to show, squeue shows finished ones for MinJobAge seconds.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Memory: sampled every second (task=1), a step above its request is killed.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
MinJobAge=600
# Seconds between SIGTERM and SIGKILL for a cancelled or timed-out job.
KillWait=5
ReturnToService=2
MpiDefault=none
SlurmdTimeout=300
SETTINGS
}
