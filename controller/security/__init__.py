"""Who may call the controller: certificates for development, the role policy."""
