"""The parts of :mod:`engram_host.checkpoint`, one concern each, lowest first: ``base`` (errors, dtypes, limits),
``strict_json``, ``safetensors`` (one file), ``model`` (files, index, directory), ``selection``, ``fingerprint``,
``records`` (the digest record's format), ``served`` (content identity, the fingerprint ``serve`` gives),
``limits``. Import from :mod:`engram_host.checkpoint`; these modules are private."""
