"""Slurm: controller, nodes and the rendered slurm.conf / gres.conf."""
