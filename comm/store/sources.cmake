# The job's key-value store: client (Store) and server (StoreServer).
set(comm_sources
  client.cpp
  connection.cpp
  peer_uid.cpp
  secret_proof.cpp
  server.cpp
  session.cpp
  sha256.cpp
  socket.cpp
  table.cpp
  wire.cpp
)
