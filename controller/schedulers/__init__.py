"""What schedulers read: host names for the fabric's servers, and the fabric's
topology in their own formats (Slurm, Kueue, Volcano, Topograph labels)."""
