"""The inbound mail server (``layang inbound``): the MX of the return-path domains, where
bounce and complaint reports come back; ``reports`` reads them."""
