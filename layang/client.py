"""The Python SDK where its users import it from: ``from layang.client import Layang``.

The SDK itself is the ``layang_client`` package, which needs the standard library and httpx
only and reads its defaults (``LAYANG_API_KEY``, ``LAYANG_BASE_URL``) from the environment as
an application's library should; the service's own modules never do (``layang.config`` does).
"""

from layang_client import *  # noqa: F403 - the SDK's public names, as it lists them
from layang_client import USER_AGENT, __all__, url_of_bind  # noqa: F401 - used by callers too
