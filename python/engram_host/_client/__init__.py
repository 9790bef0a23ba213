"""The parts of :mod:`engram_host.client`, one concern each, lowest first: ``options``, ``cancel``, ``transport``
(the socket), ``handshake``, ``control`` (STATUS, STOP), ``expectations``, ``manifest`` (what the answer must
meet), ``attachment`` (the one owner of an import's memory), ``attach_memfd``, ``attach_cuda``, ``attach``,
``tables``, ``watch``, ``content`` (the content check), ``imported``, ``background``, ``connect``, ``disk`` (the
fallback). The arithmetic of runs of regions is ``engram_host._regions``'. Import from :mod:`engram_host.client`;
these modules are private."""
