from dreamcade.cli import entry

entry()
