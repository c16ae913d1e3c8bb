"""Package data: the default benchmark suite (installed as ``specchat.bench_data``)."""
