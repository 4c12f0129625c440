public import Crypto
public import Foundation

/// SHA-256 as the protocol writes it: 64 lower-case hex digits. swift-crypto's, not the agent's
/// own (libavutil's), so a test that compares the two checks one against the other.
public func sha256Hex(_ bytes: some DataProtocol) -> String {
    SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
}
