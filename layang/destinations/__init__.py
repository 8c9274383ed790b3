"""What Layang knows about the places mail goes, apart from the machinery that moves it
(``layang.delivery``): where a recipient domain's mail goes (``mx``), how hard each site may be
pushed (``shaping``), what every sender process agrees about each site (``sites``), the transport
security a domain asks for (``policy``, by standard: ``mta_sts``, ``dane``, ``certificates``) and
how sessions met it (``tlsrpt``), and the one place DNS resolvers are built (``dns``).

The delivery engines and the domain read and record through here; nothing here calls back into
them (docs/architecture.md).
"""
