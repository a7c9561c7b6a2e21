"""reconscore's evaluation layer: caption metrics, agreement with humans, the papers' studies, reports and the
`reconscore` command line (eval.cli). May import every other reconscore package."""
