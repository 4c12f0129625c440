import Crypto
import Foundation
@testable import GuidanceServer
import Testing

/// RFC 8628's outcomes, the refresh-token family rules and the code-entry limits, with time
/// passed in: no socket, no clock, no storage.
@Suite struct DeviceAuthorizationTests {
    let start: Int64 = 1_780_000_000_000

    @Test func aCodeIsPendingUntilApprovedThenIssuedOnceThenSpent() {
        var grant = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        #expect(grant.poll(nowMs: start + 5_000) == .authorizationPending)
        #expect(grant.poll(nowMs: start + 10_000) == .authorizationPending)
        #expect(grant.decide(.approve(owner: 42), nowMs: start + 12_000) == .decided)
        // Approved: credentials at the next poll, even one sooner than the interval.
        #expect(grant.poll(nowMs: start + 13_000) == .issue(owner: 42))
        #expect(grant.state == .redeemed)
        // The device code cannot be redeemed twice.
        #expect(grant.poll(nowMs: start + 20_000) == .invalidGrant)
        #expect(grant.poll(nowMs: start + 20_000).error == "invalid_grant")
    }

    @Test func pollingTooFastSlowsTheDeviceDownByFiveSecondsEachTime() {
        var grant = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        #expect(grant.intervalSeconds == 5)
        #expect(grant.poll(nowMs: start + 1_000) == .authorizationPending)  // the first poll: nothing to compare
        #expect(grant.poll(nowMs: start + 2_000) == .slowDown(interval: 10))
        #expect(DeviceAuthorization.PollOutcome.slowDown(interval: 10).error == "slow_down")
        // The new interval holds for every later poll (§3.5): 9 s after the last is still too soon.
        var later = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        _ = later.poll(nowMs: start)
        #expect(later.poll(nowMs: start + 4_999) == .slowDown(interval: 10))
        #expect(later.poll(nowMs: start + 13_999) == .slowDown(interval: 15))
        let onTime = later.poll(nowMs: start + 28_999)
        #expect(onTime == .authorizationPending)
        #expect(onTime.error == "authorization_pending")
        #expect(later.intervalSeconds == 15)
    }

    @Test func theIntervalStopsGrowingAtAMinute() {
        var grant = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        var now = start
        for _ in 0..<40 {
            now += 100
            _ = grant.poll(nowMs: now)
        }
        #expect(grant.intervalSeconds == 60)
    }

    @Test func aCodeExpiresAfterTenMinutesWhateverHappened() {
        var pending = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        #expect(pending.secondsLeft(nowMs: start) == 600)
        #expect(pending.poll(nowMs: start + 599_999) == .authorizationPending)
        #expect(pending.poll(nowMs: start + 600_000) == .expiredToken)
        #expect(pending.poll(nowMs: start + 600_000).error == "expired_token")
        // An owner who types it a moment too late is told, and nothing is approved.
        #expect(pending.decide(.approve(owner: 1), nowMs: start + 600_000) == .expired)
        #expect(pending.state == .pending)

        // Approved but never collected: expired too.
        var approved = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        #expect(approved.decide(.approve(owner: 1), nowMs: start + 1_000) == .decided)
        #expect(approved.poll(nowMs: start + 700_000) == .expiredToken)
    }

    @Test func aDeniedCodeIsRefusedUntilItExpires() {
        var grant = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        #expect(grant.decide(.deny, nowMs: start + 1_000) == .decided)
        #expect(grant.poll(nowMs: start + 6_000) == .accessDenied)
        #expect(grant.poll(nowMs: start + 6_000).error == "access_denied")
        #expect(grant.poll(nowMs: start + 600_001) == .expiredToken)
    }

    @Test func aCodeIsDecidedOnce() {
        var grant = DeviceAuthorization(deviceName: "car-7", nowMs: start)
        #expect(grant.decide(.approve(owner: 1), nowMs: start) == .decided)
        #expect(grant.decide(.approve(owner: 2), nowMs: start) == .alreadyDecided)
        #expect(grant.decide(.deny, nowMs: start) == .alreadyDecided)
        #expect(grant.poll(nowMs: start + 5_000) == .issue(owner: 1))
    }

    @Test func userCodesAreNineDigitsReadInGroupsOfThree() {
        var generator = SystemRandomNumberGenerator()
        var seen = Set<String>()
        for _ in 0..<200 {
            let code = DeviceCodes.newUserCode(using: &generator)
            #expect(code.count == 9 && code.allSatisfy(\.isNumber))
            seen.insert(code)
        }
        #expect(seen.count > 190)
        #expect(DeviceCodes.grouped("012345678") == "012 345 678")
        let device = DeviceCodes.newDeviceCode(using: &generator)
        #expect(device.count == 43)
        #expect(!device.contains("+") && !device.contains("/") && !device.contains("="))
    }

    @Test(arguments: [
        ("012 345 678", "012345678"), ("012-345-678", "012345678"), ("  012345678 ", "012345678"),
        ("0 1 2 3 4 5 6 7 8", "012345678"), ("012.345.678", "012345678")
    ])
    func typedCodesAreReadWithTheirSeparators(typed: String, code: String) {
        #expect(DeviceCodes.normalize(typed) == code)
    }

    @Test(arguments: [
        "", "12345678", "0123456789", "abc def ghi", "012 345 67o", "０１２３４５６７８", "012345678\u{0}", String(repeating: "1", count: 10_000)
    ])
    func anythingButNineDigitsIsNotACode(typed: String) {
        #expect(DeviceCodes.normalize(typed) == nil)
    }
}

@Suite struct CodeEntryLimiterTests {
    let now: Int64 = 1_780_000_000_000

    @Test func theSixthWrongCodeInAWindowWaitsForTheOldestToAgeOut() {
        let limiter = CodeEntryLimiter.perAccount
        let failures = (0..<5).map { now - Int64(60_000 * (5 - $0)) }  // 5, 4, 3, 2, 1 minutes ago
        #expect(limiter.verdict(failures: Array(failures.prefix(4)), nowMs: now) == .allowed)
        // The oldest, 5 minutes ago, leaves the 15-minute window in 10 minutes.
        #expect(limiter.verdict(failures: failures, nowMs: now) == .wait(seconds: 600))
        #expect(limiter.verdict(failures: failures, nowMs: now + 600_000) == .allowed)
    }

    @Test func failuresOutsideTheWindowOrInTheFutureDoNotCount() {
        let limiter = CodeEntryLimiter(maxFailures: 2, windowMs: 1_000)
        #expect(limiter.verdict(failures: [now - 1_000, now - 5_000, now + 10], nowMs: now) == .allowed)
        #expect(limiter.verdict(failures: [now - 999, now], nowMs: now) == .wait(seconds: 1))
    }
}

@Suite struct RefreshTokenRulesTests {
    let rules = RefreshTokenRules(graceMs: 30_000)
    let now: Int64 = 1_780_000_000_000

    @Test func theCurrentTokenRotatesUntilItExpires() {
        let current = RefreshTokenRules.Presented(familyRevoked: false, spentAtMs: nil, successorUsed: false, expiresAtMs: now + 1)
        #expect(rules.judge(current, nowMs: now) == .rotate)
        #expect(rules.judge(current, nowMs: now + 1) == .refuse)
    }

    @Test func theSameTokenAgainSoonAfterIsARetryOnAPatchyLink() {
        let spent = RefreshTokenRules.Presented(
            familyRevoked: false, spentAtMs: now - 5_000, successorUsed: false, expiresAtMs: now + 86_400_000)
        #expect(rules.judge(spent, nowMs: now) == .retry)
        #expect(rules.judge(spent, nowMs: now - 5_000 + 30_000) == .retry)
        // Past the grace it is reuse: the family goes.
        #expect(rules.judge(spent, nowMs: now - 5_000 + 30_001) == .reuse)
    }

    @Test func aSpentTokenWhoseSuccessorWasUsedIsReuseAtOnce() {
        let spent = RefreshTokenRules.Presented(
            familyRevoked: false, spentAtMs: now - 1_000, successorUsed: true, expiresAtMs: now + 86_400_000)
        #expect(rules.judge(spent, nowMs: now) == .reuse)
    }

    @Test func aRevokedFamilyRefusesEveryToken() {
        for spentAt in [nil, now - 1_000] as [Int64?] {
            let token = RefreshTokenRules.Presented(
                familyRevoked: true, spentAtMs: spentAt, successorUsed: false, expiresAtMs: now + 86_400_000)
            #expect(rules.judge(token, nowMs: now) == .refuse)
        }
    }
}

@Suite struct WebhookSignatureTests {
    let secret = SymmetricKey(data: Data("whsec_test_secret".utf8))
    let body = Data(#"{"id":"pay_1","status":"succeeded","amount":500}"#.utf8)
    let now: Int64 = 1_780_000_000
    let checker = WebhookSignature(toleranceSeconds: 300)

    @Test func aSignedBodyIsBelieved() throws {
        let header = WebhookSignature.header(body: body, secret: secret, timestamp: now - 10)
        #expect(header.hasPrefix("t=\(now - 10),v1="))
        #expect(throws: Never.self) { try checker.verify(header: header, body: body, secret: secret, nowSeconds: now).get() }
    }

    /// Hex digits in either case are the same signature (the pairing fuzz target's first finding
    /// was its own promise assuming lower case: fuzz/regressions/pairing).
    @Test func aSignatureInUpperCaseHexIsTheSameSignature() {
        let header = WebhookSignature.header(body: body, secret: secret, timestamp: now)
        let (t, v1) = (header.components(separatedBy: ",v1=")[0], header.components(separatedBy: ",v1=")[1])
        #expect(result(t + ",v1=" + v1.uppercased(), body) == nil)
    }

    @Test func aTamperedBodyIsNot() {
        let header = WebhookSignature.header(body: body, secret: secret, timestamp: now)
        var tampered = body
        tampered[tampered.count - 2] = UInt8(ascii: "9")
        #expect(result(header, tampered) == .mismatch)
        #expect(result(header, body + Data(" ".utf8)) == .mismatch)
        let otherSecret = WebhookSignature.header(body: body, secret: SymmetricKey(data: Data("other".utf8)), timestamp: now)
        #expect(result(otherSecret, body) == .mismatch)
        // The timestamp is signed too: moving it breaks the signature.
        let moved = header.replacingOccurrences(of: "t=\(now)", with: "t=\(now + 1)")
        #expect(result(moved, body) == .mismatch)
    }

    @Test func anOldOrFutureTimestampIsStale() {
        #expect(result(WebhookSignature.header(body: body, secret: secret, timestamp: now - 301), body) == .stale)
        #expect(result(WebhookSignature.header(body: body, secret: secret, timestamp: now + 301), body) == .stale)
        #expect(result(WebhookSignature.header(body: body, secret: secret, timestamp: now - 300), body) == nil)
    }

    @Test func anyOfSeveralSignaturesMayMatchWhileASecretIsRotated() {
        let good = WebhookSignature.header(body: body, secret: secret, timestamp: now)
        let old = WebhookSignature.header(body: body, secret: SymmetricKey(data: Data("old".utf8)), timestamp: now)
        let oldV1 = old.components(separatedBy: "v1=")[1]
        #expect(result("\(good),v1=\(oldV1)", body) == nil)
        #expect(result("t=\(now),v1=\(oldV1),v0=abc", body) == .mismatch)
    }

    @Test(arguments: [
        nil, "", "t=1", "v1=00", "t=abc,v1=00", "t=1,t=2,v1=00", "t=-5,v1=" + String(repeating: "0", count: 64),
        "t=1780000000,v1=zz", "t=1780000000,v1=" + String(repeating: "0", count: 63),
        "=t=1780000000,v1=" + String(repeating: "0", count: 64), "t =1780000000,v1=" + String(repeating: "0", count: 64),
        "t=99999999999999999999,v1=" + String(repeating: "0", count: 64), "garbage", String(repeating: "t=1,", count: 400)
    ])
    func malformedHeadersAreRefused(header: String?) {
        #expect(result(header, body) == .malformed)
    }

    private func result(_ header: String?, _ body: Data) -> WebhookSignature.Failure? {
        switch checker.verify(header: header, body: body, secret: secret, nowSeconds: now) {
        case .success: nil
        case .failure(let failure): failure
        }
    }
}

@Suite struct AccessTokensTests {
    let tokens = AccessTokens(key: Array(repeating: 7, count: 32), lifetimeSeconds: 600)
    let now: Int64 = 1_780_000_000

    @Test func aTokenNamesItsDeviceUntilItExpires() throws {
        let (token, claims) = tokens.issue(device: "car-abc", owner: 3, nowSeconds: now)
        #expect(claims.exp == now + 600)
        #expect(tokens.verify(token, nowSeconds: now + 599)?.sub == "car-abc")
        #expect(tokens.verify(token, nowSeconds: now + 599)?.owner == 3)
        #expect(tokens.verify(token, nowSeconds: now + 600) == nil)
        // Another server's key does not verify it.
        #expect(AccessTokens(key: Array(repeating: 8, count: 32)).verify(token, nowSeconds: now) == nil)
    }

    @Test func aChangedOrForgedTokenIsRefused() throws {
        let (token, _) = tokens.issue(device: "car-abc", owner: 3, nowSeconds: now)
        let parts = token.split(separator: ".").map(String.init)
        // Another device in the payload, the signature kept.
        let payload = AccessTokens.base64URL(
            Data(#"{"aud":"guidance-stream","exp":1780000600,"iat":1780000000,"iss":"guidance-server","owner":3,"sub":"car-xyz"}"#.utf8))
        #expect(tokens.verify([parts[0], payload, parts[2]].joined(separator: "."), nowSeconds: now) == nil)
        // "alg": "none" and an empty signature.
        let none = AccessTokens.base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8))
        #expect(tokens.verify([none, parts[1], ""].joined(separator: "."), nowSeconds: now) == nil)
        for bad in ["", ".", "..", "a.b.c", token + ".", String(token.dropLast()), token + "=", String(repeating: "a", count: 5000)] {
            #expect(tokens.verify(bad, nowSeconds: now) == nil, "\(bad.prefix(40))")
        }
    }
}

@Suite struct RequestBudgetTests {
    @Test func tenCodesPerAddressInTenMinutes() {
        var budget = RequestBudget(perWindow: 10, windowMs: 600_000, maxAddresses: 100)
        for i in 0..<10 {
            let allowed = budget.allow("192.0.2.1", nowMs: Int64(i))
            #expect(allowed)
        }
        let eleventh = budget.allow("192.0.2.1", nowMs: 599_999)
        let other = budget.allow("192.0.2.2", nowMs: 599_999)
        let later = budget.allow("192.0.2.1", nowMs: 600_000)
        #expect(!eleventh)
        #expect(other, "another address has its own")
        #expect(later, "a new window")
    }

    @Test func addressesAreRememberedUpToTheCap() {
        var budget = RequestBudget(perWindow: 1, windowMs: 600_000, maxAddresses: 50)
        var allowed = 0
        for i in 0..<1000 where budget.allow("198.51.100.\(i)", nowMs: Int64(i)) { allowed += 1 }
        #expect(allowed == 1000)
        #expect(budget.remembered <= 50)
        // The newest are the ones remembered: the last address is still held to its one request.
        let again = budget.allow("198.51.100.999", nowMs: 1000)
        #expect(!again)
    }
}
