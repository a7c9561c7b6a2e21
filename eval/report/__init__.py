"""Static HTML reports of reconscore runs (eval.report.build.build_report)."""
