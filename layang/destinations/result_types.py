"""The result types of RFC 8460 section 4.3: the words every transport security check here
(certificates, MTA-STS, DANE) gives its failures in, and TLS-RPT counts sessions by."""

from __future__ import annotations

STARTTLS_NOT_SUPPORTED = "starttls-not-supported"
CERTIFICATE_HOST_MISMATCH = "certificate-host-mismatch"
CERTIFICATE_EXPIRED = "certificate-expired"
CERTIFICATE_NOT_TRUSTED = "certificate-not-trusted"
VALIDATION_FAILURE = "validation-failure"
TLSA_INVALID = "tlsa-invalid"
DNSSEC_INVALID = "dnssec-invalid"
STS_POLICY_FETCH_ERROR = "sts-policy-fetch-error"
STS_POLICY_INVALID = "sts-policy-invalid"
STS_WEBPKI_INVALID = "sts-webpki-invalid"

NO_TLS = "no TLS"
"""How the reason of a session that carried mail in plaintext (opportunistic TLS not had)
begins, so that it is told apart from sessions refused for their TLS."""
