"""The small error hierarchy the CLI turns into exit code 2 with a one-line message."""


class ZoorankError(Exception):
    """A user-facing problem (bad config, bad input). The CLI prints it and exits 2."""


class ConfigError(ZoorankError):
    """The run config is invalid; the message names the field and the file."""


class InputError(ZoorankError):
    """An input file or array is unusable; the message names the file or the argument."""


class NothingRankedError(ZoorankError):
    """The run finished but no model could be ranked (every model failed or is missing).

    The CLI exits with :data:`EXIT_NOTHING_RANKED`; what failed is in the manifest, the ``failed`` table
    and the report.
    """


#: exit status of a run in which nothing could be ranked (see NothingRankedError).
EXIT_NOTHING_RANKED = 3
