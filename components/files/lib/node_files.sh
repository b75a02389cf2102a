# Files every node runs with beyond its image's packages: the OOM killer's last picks (slurmd
# and munged; slurmstepd gives a job's tasks 0 again) and the timer that removes what ended
# jobs left in /dev/shm and /tmp (JOB_FILES_REAPER: components/slurm/files/job_files_reaper.sh,
# every 30 s). Written into the node image when it is built, so that a node starts with them
# and its slurmd's create changes nothing (no systemd reload in each node); staged by that
# create as well, for nodes of an image built before them.
# node_files WRITER: WRITER PATH MODE, with the file's text on stdin, for each file.
node_files() {
  local unit
  require JOB_FILES_REAPER
  for unit in slurmd munge; do
    printf '[Service]\nOOMScoreAdjust=-1000\n' | "$1" "/etc/systemd/system/$unit.service.d/gpucluster-oom.conf" 0644
  done
  printf '%s' "$JOB_FILES_REAPER" | "$1" /usr/local/sbin/gpucluster-job-files 0755
  printf '[Unit]\nDescription=gpu-cluster: remove what ended jobs left in /dev/shm and /tmp\n[Service]\nType=oneshot\nExecStart=/usr/local/sbin/gpucluster-job-files\n' |
    "$1" /etc/systemd/system/gpucluster-job-files.service 0644
  printf '[Unit]\nDescription=gpu-cluster: files of ended jobs in /dev/shm and /tmp\n[Timer]\nOnBootSec=60\nOnUnitActiveSec=30\nAccuracySec=5\n[Install]\nWantedBy=timers.target\n' |
    "$1" /etc/systemd/system/gpucluster-job-files.timer 0644
}
# The timer's enable link, as `systemctl enable` makes it.
NODE_FILES_TIMER_LINK=/etc/systemd/system/timers.target.wants/gpucluster-job-files.timer
