import Agent
import ArgumentParser
import Dispatch

@main
struct DashcamAgent: AsyncParsableCommand {
    static let configuration = DashcamAgentCommand.configuration

    /// Runs the command on the concurrency pool and parks the main thread until it ends. An async
    /// `main` would hand the main thread to `dispatch_main`, whose `pthread_exit` unwinds it and
    /// reads the unwind tables of the whole binary (resident memory a recording never needs back;
    /// BENCHMARKS.md, "Recording"). Detached: nothing may wait for the main actor, whose queue
    /// this thread, parked, never drains.
    static func main() {
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            await main(nil)
            done.signal()
        }
        done.wait()
    }
}
