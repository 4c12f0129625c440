@testable import GuidanceServer
import Testing

/// The rules for calling a hosted model, without sockets or clocks: times are instants built by hand.
@Suite struct HostedModelStateMachineTests {
    let start = ContinuousClock.now
    var deadline: ContinuousClock.Instant { start.advanced(by: .seconds(8)) }

    @Test func only429And5xxOfThoseFourAndTransportFailuresAreTriedAgain() {
        let rules = HostedModelAnalyzer.StateMachine()
        for status in [429, 500, 503, 504] {
            #expect(rules.retry(after: .status(status, retryAfter: nil), attempt: 1, now: start, deadline: deadline, jitter: 1) != nil)
        }
        for status in [400, 401, 403, 404, 409, 413, 422, 501, 502] {
            #expect(
                rules.retry(after: .status(status, retryAfter: nil), attempt: 1, now: start, deadline: deadline, jitter: 1) == nil,
                "\(status)")
        }
        #expect(rules.retry(after: .transport, attempt: 1, now: start, deadline: deadline, jitter: 1) != nil)
        #expect(rules.retry(after: .malformed, attempt: 1, now: start, deadline: deadline, jitter: 1) == nil)
    }

    @Test func backoffDoublesWithFullJitterAndStopsAfterTheLastAttempt() {
        var settings = HostedModelAnalyzer.StateMachine.Settings()
        settings.maxAttempts = 4
        settings.backoff = .milliseconds(250)
        let rules = HostedModelAnalyzer.StateMachine(settings: settings)
        #expect(rules.retry(after: .transport, attempt: 1, now: start, deadline: deadline, jitter: 1) == .milliseconds(250))
        #expect(rules.retry(after: .transport, attempt: 2, now: start, deadline: deadline, jitter: 1) == .milliseconds(500))
        #expect(rules.retry(after: .transport, attempt: 3, now: start, deadline: deadline, jitter: 0.5) == .milliseconds(500))
        #expect(rules.retry(after: .transport, attempt: 2, now: start, deadline: deadline, jitter: 0) == .zero)
        #expect(rules.retry(after: .transport, attempt: 4, now: start, deadline: deadline, jitter: 1) == nil)
        // A jitter outside 0…1 is clamped, never a longer or negative wait.
        #expect(rules.retry(after: .transport, attempt: 1, now: start, deadline: deadline, jitter: 7) == .milliseconds(250))
        #expect(rules.retry(after: .transport, attempt: 1, now: start, deadline: deadline, jitter: -1) == .zero)
    }

    @Test func theServicesOwnDelayIsHonouredButBoundedAndNeverPastTheDeadline() {
        let rules = HostedModelAnalyzer.StateMachine()
        #expect(
            rules.retry(after: .status(429, retryAfter: .seconds(2)), attempt: 1, now: start, deadline: deadline, jitter: 0) == .seconds(2))
        // A delay that ends after the deadline gives up now: the guidance would be stale.
        #expect(rules.retry(after: .status(429, retryAfter: .seconds(37)), attempt: 1, now: start, deadline: deadline, jitter: 0) == nil)
        #expect(
            rules.retry(after: .transport, attempt: 1, now: deadline.advanced(by: .milliseconds(-10)), deadline: deadline, jitter: 1) == nil
        )
        var long = HostedModelAnalyzer.StateMachine.Settings()
        long.maxBackoff = .seconds(1)
        #expect(
            HostedModelAnalyzer.StateMachine(settings: long).retry(
                after: .status(503, retryAfter: .seconds(5)), attempt: 1, now: start,
                deadline: deadline, jitter: 0) == .seconds(1))
    }

    @Test func theBreakerOpensAfterFailedSegmentsInARowRefusesThenLetsOneProbeThrough() {
        var rules = HostedModelAnalyzer.StateMachine()
        let open = rules.settings.openFor
        for failure in 1..<rules.settings.failuresToOpen {
            #expect(rules.admit(now: start) == .call)
            rules.finished(succeeded: false, lastOutcome: .status(503, retryAfter: nil), now: start)
            #expect(rules.breaker == .closed(failures: failure))
        }
        rules.finished(succeeded: false, lastOutcome: .transport, now: start)
        #expect(rules.breaker == .open(until: start.advanced(by: open)))
        #expect(rules.admit(now: start.advanced(by: open - .milliseconds(1))) == .refuse)
        // Once the time is up, one probe goes out; everyone else waits for it.
        let later = start.advanced(by: open)
        #expect(rules.admit(now: later) == .call)
        #expect(rules.breaker == .probing)
        #expect(rules.admit(now: later) == .refuse)
        // A failed probe opens it again, for another period.
        rules.finished(succeeded: false, lastOutcome: .status(429, retryAfter: nil), now: later)
        #expect(rules.breaker == .open(until: later.advanced(by: open)))
        // A good probe closes it.
        #expect(rules.admit(now: later.advanced(by: open)) == .call)
        rules.finished(succeeded: true, lastOutcome: .answered, now: later.advanced(by: open))
        #expect(rules.breaker == .closed(failures: 0))
    }

    @Test func refusedRequestsAndUnreadableAnswersSayNothingAboutTheService() {
        var rules = HostedModelAnalyzer.StateMachine()
        rules.finished(succeeded: false, lastOutcome: .status(503, retryAfter: nil), now: start)
        #expect(rules.breaker == .closed(failures: 1))
        rules.finished(succeeded: false, lastOutcome: .status(400, retryAfter: nil), now: start)
        #expect(rules.breaker == .closed(failures: 0))
        for _ in 0..<10 { rules.finished(succeeded: false, lastOutcome: .malformed, now: start) }
        #expect(rules.breaker == .closed(failures: 0))
    }

    @Test func anAbandonedProbeLetsTheNextSegmentProbe() {
        var rules = HostedModelAnalyzer.StateMachine()
        for _ in 0..<rules.settings.failuresToOpen { rules.finished(succeeded: false, lastOutcome: .transport, now: start) }
        let later = start.advanced(by: rules.settings.openFor)
        #expect(rules.admit(now: later) == .call)
        rules.abandoned(now: later)
        #expect(rules.admit(now: later) == .call)
        // An abandoned request while closed changes nothing.
        var closed = HostedModelAnalyzer.StateMachine()
        closed.abandoned(now: start)
        #expect(closed.breaker == .closed(failures: 0))
    }

    @Test func retryDelaysAreReadFromGooglesRetryInfo() {
        let body =
            #"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.500s"}]}}"#
        #expect(GeminiAPI.retryDelay(errorBody: Data(body.utf8)) == .milliseconds(1500))
        #expect(GeminiAPI.protobufDuration("37s") == .seconds(37))
        for bad in ["", "s", "-1s", "1e400s", "nan s", "37", "999999999s"] {
            #expect(GeminiAPI.protobufDuration(bad) == nil, "\(bad)")
        }
        #expect(GeminiAPI.retryDelay(errorBody: Data("not json".utf8)) == nil)
    }

    /// One device whose segments the service chokes on (5xx, or a timeout on a huge clip), among
    /// devices the service answers: not the service being down; the breaker stays closed. Two
    /// devices failing, or the only device using the service, open it.
    @Test func oneDevicesFailuresDoNotOpenTheBreakerForEveryone() {
        let start = ContinuousClock.now
        var rules = HostedModelAnalyzer.StateMachine()
        #expect(rules.admit(device: "good", now: start) == .call)
        for _ in 0..<10 {
            #expect(rules.admit(device: "odd", now: start) == .call)
            rules.finished(device: "odd", succeeded: false, lastOutcome: .status(500, retryAfter: nil), now: start)
        }
        #expect(rules.admit(device: "good", now: start) == .call, "\(rules.breaker)")
        // A second device failing too: the service is in trouble.
        rules.finished(device: "good", succeeded: false, lastOutcome: .transport, now: start)
        #expect(rules.admit(device: "good", now: start) == .refuse)

        var alone = HostedModelAnalyzer.StateMachine()
        for _ in 0..<alone.settings.failuresToOpen {
            #expect(alone.admit(device: "car-1", now: start) == .call)
            alone.finished(device: "car-1", succeeded: false, lastOutcome: .status(503, retryAfter: nil), now: start)
        }
        #expect(alone.admit(device: "car-1", now: start) == .refuse, "the only device: its failures are the service's")
    }
}

import Foundation
