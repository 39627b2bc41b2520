version = "1.4.2"
ports   = [8080, 8443]
