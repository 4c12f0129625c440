import HAL
import ServiceLifecycle

/// What the driver hears and feels: guidance from the uplink to the speaker and the motor, and
/// the status phrases for the camera and the connection.
///
/// Earlier in the group than the uplink and the recording, so it is shut down after them: by
/// then the uplink has ended its streams and every guidance it received has been routed.
struct GuidanceService: Service {
    let router: GuidanceRouter
    let announcer: StatusAnnouncer
    let board: StatusBoard
    let cameraEvents: AsyncStream<CameraEvent>
    let uplink: Uplink?
    /// Hears the sessions and the usage too, to know when the device must guide itself.
    let localGuidance: LocalGuidance?
    let voice: DeviceVoice
    /// True at the end of a run of N segments: its last guidance is spoken before the agent ends
    /// (bounded); a service that is told to stop does not wait for speech.
    let speakToTheEnd: @Sendable () -> Bool
    /// Told when the server refuses the device's credentials (a paired car checks them).
    var refused: (@Sendable () async -> Void)? = nil
    /// How long the end of a run waits for its last guidance to be spoken before cutting it off.
    static let lastSpeechBound: Duration = .seconds(15)

    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { [board, announcer, cameraEvents] in
                for await event in cameraEvents {
                    board.camera(event)
                    await announcer.camera(event)
                }
            }
            guard let uplink else { return }
            group.addTask { [announcer, localGuidance, refused] in
                for await state in uplink.states {
                    await announcer.uplink(state)
                    await localGuidance?.uplink(state)
                    if case .authenticationFailed = state { await refused?() }
                }
            }
            // One guidance message from the wire to the speaker and the motor.
            for await message in uplink.messages {
                await router.route(message, receivedAt: .now)
                await localGuidance?.received(message)
            }
        }
        // The group stops its services one by one: this one ends when its turn comes.
        try? await gracefulShutdown()
        guard uplink != nil, speakToTheEnd() else { return }
        await withTaskGroup(of: Void.self) { speaking in
            speaking.addTask { [voice] in await voice.waitUntilIdle() }
            speaking.addTask { try? await Task.sleep(for: Self.lastSpeechBound) }
            _ = await speaking.next()
            voice.close()  // idle already, or past the bound: cut off (which ends the wait)
            speaking.cancelAll()
        }
    }
}
