"""Laws of sparsity for mixture-of-experts sweeps (torch-free): forms, reading, recommending."""
