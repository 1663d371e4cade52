"""Train one run: model, data, loop. ``train(spec, store_url, run_dir)`` is the entry point."""
