package appliance

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"mcpintercept/config"
	"mcpintercept/credentials"
	"mcpintercept/intercept/upstream"
)

// credentialOptions builds a route's credentials stage options: nil when the route adds none.
// With load, files are read here, so a SIGHUP (which rebuilds the routes) re-reads them; an
// exchange's cache starts empty with the new routes. Without, the options only describe the
// route (check, declare, policy test).
func credentialOptions(cfg *config.Config, r config.Route, load bool) (*credentials.Options, error) {
	c := r.Credentials
	if !c.On() {
		return nil, nil
	}
	o := &credentials.Options{Action: c.Action(), Header: c.HeaderName(), Scheme: c.SchemeName(),
		Source: c.Source(), Placeholder: c.Placeholder, Strip: c.Other == config.CredentialsStrip}
	if !load {
		return o, nil
	}
	switch o.Action {
	case credentials.ActionInject:
		s, err := credentials.LoadSecret(c.Inject.File)
		if err != nil {
			return nil, fmt.Errorf("route %s: credentials.inject: %w", r.Name, err)
		}
		o.Secret = s
	case credentials.ActionExchange:
		e := c.Exchange
		secret, err := credentials.LoadSecret(e.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("route %s: credentials.exchange.client_secret_file: %w", r.Name, err)
		}
		ec := credentials.ExchangeConfig{Endpoint: e.TokenEndpoint, ClientID: e.ClientID, ClientSecret: secret,
			Audience: e.Audience, Scope: e.Scope, SubjectTokenType: e.SubjectTokenType,
			RequestedTokenType: e.RequestedTokenType, Timeout: e.Timeout.Duration,
			Dial: upstream.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration).DialContext}
		for _, p := range e.Params {
			k, v, _ := strings.Cut(p, "=")
			ec.Params = append(ec.Params, [2]string{k, v})
		}
		if e.CAFile != "" {
			pem, err := os.ReadFile(e.CAFile)
			if err != nil {
				return nil, fmt.Errorf("route %s: credentials.exchange.ca_file: %w", r.Name, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("route %s: credentials.exchange.ca_file %s holds no PEM certificate", r.Name, e.CAFile)
			}
			ec.RootCAs = pool
		}
		o.Exchanger = credentials.NewExchanger(ec)
	}
	return o, nil
}
