// Package natsconn holds the NATS client settings that dpserve's replicated
// mode and train's workers share: how a client proves itself to the NATS
// servers and how it checks them.
package natsconn

import "github.com/nats-io/nats.go"

// Security is a client's credentials: a NATS credentials file, a private CA
// for the servers' certificates, and a client certificate with its key.
// Empty fields are not used.
type Security struct {
	Creds, CA, Cert, Key string
}

// Options returns the nats.Connect options that apply s.
func (s Security) Options() []nats.Option {
	var opts []nats.Option
	if s.Creds != "" {
		opts = append(opts, nats.UserCredentials(s.Creds))
	}
	if s.CA != "" {
		opts = append(opts, nats.RootCAs(s.CA))
	}
	if s.Cert != "" {
		opts = append(opts, nats.ClientCert(s.Cert, s.Key))
	}
	return opts
}
