"""The inbound mail server: bounce and complaint reports coming back."""
