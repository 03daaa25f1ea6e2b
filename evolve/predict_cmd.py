"""`evolve predict`: its flags (docs/predict.md). Standard library only, so that building the
parser (`evolve --help`) loads nothing heavy; the command itself is `evolve.predict_run`, which
`evolve.cli` imports when the command runs."""
from __future__ import annotations


def add_parser(sub, func) -> None:
    """The `predict` subcommand's flags; `func` runs it (`evolve.cli.cmd_predict`)."""
    p = sub.add_parser("predict", help="predict a deployment and workload nobody measured with a stored program "
                                       "(its constants never refitted): latencies, throughput, failures, band, knee")
    p.add_argument("program", help="archive program id, or a program file (with --constants)")
    p.add_argument("--archive", default="archive.db", metavar="PATH")
    p.add_argument("--constants", metavar="JSON",
                   help="for a program file: its fit, as `evolve evaluate PROGRAM --json` prints it")
    p.add_argument("--data", metavar="DIR", default=None,
                   help="ground truth: models, measured KV blocks, kernel tables, traces and the fit's data for "
                        "the overhead law and the regimes (default: the archive run's --data, else the embedded table)")
    d = p.add_argument_group("deployment")
    d.add_argument("--model", help="a model of the data, a shipped config (evaluator/model_configs) or a config.json")
    d.add_argument("--tp", type=int, default=None, help="tensor parallelism (default: the data's, else 1)")
    d.add_argument("--max-num-seqs", type=int, default=None, help="default: the data's (128)")
    d.add_argument("--max-num-batched-tokens", type=int, default=None, help="default: the data's (2048)")
    d.add_argument("--max-model-len", type=int, default=None, help="default: the data's (4096)")
    d.add_argument("--block-size", type=int, default=None, help="KV block size (default 16)")
    d.add_argument("--kv-blocks", type=int, default=None,
                   help="KV blocks per GPU (default: measured for this model/TP, else estimated from GPU memory)")
    d.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="for the estimated KV blocks (vLLM's default 0.9)")
    w = p.add_argument_group("workload")
    w.add_argument("--rate", type=str, default=None, help="one arrival rate (req/s)")
    w.add_argument("--rates", type=str, default=None, help="a sweep: LO:HI:N (e.g. 1:20:10) or R1,R2,...")
    w.add_argument("--trace", metavar="EXPERIMENT", help="replay a measured experiment of --data (id or a unique part)")
    w.add_argument("--requests", metavar="FILE", help="replay a CSV/parquet trace: arrival_time_us (or arrival_s), "
                                                      "input_tokens, output_tokens")
    w.add_argument("--prompt-tokens", metavar="MEAN[:STD]", default=None, help="prompt length (default 550)")
    w.add_argument("--output-tokens", metavar="MEAN[:STD]", default=None, help="output length (default 250)")
    w.add_argument("--workload-from", metavar="EXPERIMENT",
                   help="prompt/output lengths, prompt pool and timeout of a measured experiment")
    w.add_argument("--prompt-pool", type=int, default=None,
                   help="distinct prompts cycled through (prefix cache; default: every prompt unique)")
    w.add_argument("--system-prompt-tokens", type=int, default=None, help="shared system prompt of the pool's groups")
    w.add_argument("--num-requests", type=int, default=None, help="requests per rate (default: rate x --duration)")
    w.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals per rate (default 600)")
    w.add_argument("--timeout", type=float, default=None, help="client timeout in s (default: the data's, 300)")
    w.add_argument("--seed", type=int, default=0, help="Poisson arrivals and length draws")
    o = p.add_argument_group("output")
    o.add_argument("--slo", action="append", metavar="KEY=LIMIT",
                   help="e.g. ttft_p90=2 (seconds) or fail=0.01; repeatable: the knee meets all")
    o.add_argument("--overheads", choices=("auto", "law", "fitted", "mean"), default="auto",
                   help="request overheads: the model's fitted ones at its measured TP, else the cross-model law "
                        "(auto); always the law; always the fitted ones; the fitted models' mean (the judge's "
                        "leave-one-model-out rule, for comparison)")
    o.add_argument("--json", action="store_true", help="strict JSON (null where undefined)")
    o.add_argument("--html", metavar="FILE", help="write an offline Plotly page of the sweep")
    p.set_defaults(func=func)
