// Package effects executes effects that leave PostgreSQL — a webhook, an
// e-mail, a payment-gateway call — once per fact, from projection handlers.
//
// placeholder: the full documentation follows the implementation.
package effects
