import Foundation
@testable import GuidanceServer
import Testing

/// A shared clip's link: signed by this server for one clip, one link id and one expiry; a copy
/// with anything changed, another server's, or one past its time is nothing.
@Suite struct ShareLinksTests {
    static let links = ShareLinks(tokens: AccessTokens(key: Array("a signing key of 32 bytes or more".utf8)))
    static let grant = ShareLinks.Grant(owner: 7, device: "car-1", clip: "incident-1", share: "0123456789abcdef", expires: 2_000_000_000)

    @Test func aLinkGrantsItsClipUntilItExpires() {
        let token = Self.links.token(Self.grant)
        #expect(Self.links.verify(token, nowSeconds: 1_999_999_999) == Self.grant)
        #expect(Self.links.verify(token, nowSeconds: 2_000_000_000) == nil, "expired")
    }

    @Test func aChangedOrForeignLinkIsNothing() throws {
        let token = Self.links.token(Self.grant)
        var later = Self.grant
        later.expires += 86_400
        let payload = AccessTokens.base64URL(try JSONEncoder().encode(later))
        let signature = String(token.split(separator: ".")[1])
        #expect(Self.links.verify(payload + "." + signature, nowSeconds: 0) == nil, "a later expiry under the old signature")
        var otherClip = Self.grant
        otherClip.clip = "incident-2"
        #expect(Self.links.verify(AccessTokens.base64URL(try JSONEncoder().encode(otherClip)) + "." + signature, nowSeconds: 0) == nil)
        let foreign = ShareLinks(tokens: AccessTokens(key: Array("another server's key, 32 bytes!!".utf8)))
        #expect(foreign.verify(token, nowSeconds: 0) == nil)
        // The signature's last character carries two bits of padding: another spelling of it is not the link.
        let last = token.last!
        let respelled = String(token.dropLast()) + String(last == "A" ? "B" : "A")
        for broken in [
            respelled, "", ".", token + ".", String(token.dropLast()), token.replacingOccurrences(of: ".", with: ""),
            String(repeating: "A", count: ShareLinks.maxLength + 1)
        ] {
            #expect(Self.links.verify(broken, nowSeconds: 0) == nil, "\(broken.prefix(40))")
        }
    }
}
