package adminpb

// Message size limits of the admin API, for its server and its clients.
const (
	// MaxRequest: the largest request is a write of one bag at its limit.
	MaxRequest = 32 << 20
	// MaxReply: the largest reply is every bag of the application (a
	// read of all of them); a group holds far less than this.
	MaxReply = 1 << 30
)
