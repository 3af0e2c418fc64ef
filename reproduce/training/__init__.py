"""Training (section 5): token-count batches, Adam with eq. 3's schedule, label smoothing,
checkpoints that resume exactly, data-parallel over torch.distributed, Slurm through submitit."""
