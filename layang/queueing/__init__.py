"""The queue machinery mail and webhooks share: rows held under a lease (claim, renew, hand
back), the lease keeper that keeps a holder's leases alive, the retry policy, and the run loop
of every background process."""
