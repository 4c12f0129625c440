/// The version of this package's programs (`dashcam-agent`, `guidance-server`) and of the
/// `.deb` built from it (deploy/build-deb.sh reads it from here).
public enum ReleaseVersion {
    public static let current = "0.1.0"
}
