"""specchat-cli: the command-line front end (subcommands live in their own modules)."""
