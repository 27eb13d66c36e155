"""One module per `build.py` subcommand; each exposes `register(subparsers)`."""
