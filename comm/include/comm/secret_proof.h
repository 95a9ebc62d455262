// Proofs of a job's secret for dlaunch's own channels beside the store: the
// agents' door for a new head (docs/security.md, "A job that survives its
// head"). The same HMAC-SHA256 as the store's handshake (docs/store.md):
// each side sends a fresh challenge, each proves the secret over both
// challenges and its role, so one side's proof is never the other's and
// nothing of one exchange is worth anything in another. The secret itself
// never travels.
//
// Thread safety: none needed, all functions are pure (fresh_challenge reads
// the kernel's random source).
#pragma once

#include <array>
#include <string_view>

namespace dlaunch::comm {

inline constexpr std::size_t kProofBytes = 32;
using Proof = std::array<unsigned char, kProofBytes>;
using Challenge = std::array<unsigned char, kProofBytes>;

// HMAC-SHA256(secret, "dlaunch secret proof" || role || a || b || context).
Proof prove_secret(std::string_view secret, std::string_view role, const Challenge& a,
                   const Challenge& b, std::string_view context);

// Compared byte by byte whatever differs first (no timing tells where).
bool same_proof(const Proof& x, const Proof& y);

// Fresh random bytes; comm::Error (kInternal) if the kernel gives none.
Challenge fresh_challenge();

}  // namespace dlaunch::comm
