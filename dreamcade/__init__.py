"""The `dreamcade` command: one spelling for every job (dreamcade.cli)."""
