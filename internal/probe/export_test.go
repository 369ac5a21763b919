package probe

// CanReadWire: whether the kernel's counts of a connection's received bytes
// are read here.
const CanReadWire = canReadWire

// WithoutWire makes p judge timeouts by the controller's running time
// alone, as where the kernel's counts cannot be read.
func WithoutWire(p *HTTPProber) *HTTPProber {
	p.IgnoreKernel = true
	return p
}
