"""The client's namespaces, one per API resource: ``client.templates``, ``client.domains``…"""

from layang_client.resources.activity import Activity
from layang_client.resources.authorized_recipients import AuthorizedRecipients
from layang_client.resources.domains import Domains
from layang_client.resources.inbound import Inbound
from layang_client.resources.suppressions import Suppressions
from layang_client.resources.templates import Templates
from layang_client.resources.tracking_domains import TrackingDomains
from layang_client.resources.transmissions import Transmissions
from layang_client.resources.webhooks import Webhooks

__all__ = [
    "Activity",
    "AuthorizedRecipients",
    "Domains",
    "Inbound",
    "Suppressions",
    "Templates",
    "TrackingDomains",
    "Transmissions",
    "Webhooks",
]
