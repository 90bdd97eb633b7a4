// A KDC (Hadoop's MiniKdc) and a Kerberos-secured MiniDFSCluster in one JVM, for integration tests.
// scripts/services.sh compiles it when INGEST_KERBEROS=1 and runs:
//
//   SecureHdfs DIR REALM KDC_PORT CLIENT_PRINCIPAL -- MiniDFSClusterManager's arguments (-D security settings)
//
// It starts the KDC on 127.0.0.1:KDC_PORT, writes DIR/hdfs.keytab (hdfs/localhost and HTTP/localhost, the
// cluster's own) and DIR/client.keytab (CLIENT_PRINCIPAL only, what a user of the cluster gets), then hands
// over to MiniDFSClusterManager, which runs the cluster until the JVM is stopped.  One JVM for both keeps
// the secured services' cost to one small heap.
import java.io.File;
import java.util.Arrays;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.test.MiniDFSClusterManager;

public class SecureHdfs {
    public static void main(String[] args) throws Exception {
        if (args.length < 5 || !args[4].equals("--")) {
            System.err.println("usage: SecureHdfs DIR REALM KDC_PORT CLIENT_PRINCIPAL -- MiniDFSClusterManager args");
            System.exit(2);
        }
        File dir = new File(args[0]);
        String[] realm = args[1].split("\\.", 2);  // MiniKdc builds the realm as ORG_NAME.ORG_DOMAIN
        Properties conf = MiniKdc.createConf();
        conf.setProperty(MiniKdc.ORG_NAME, realm[0]);
        conf.setProperty(MiniKdc.ORG_DOMAIN, realm.length > 1 ? realm[1] : "TEST");
        conf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
        conf.setProperty(MiniKdc.KDC_PORT, args[2]);
        MiniKdc kdc = new MiniKdc(conf, new File(dir, "kdc"));
        kdc.start();  // also points java.security.krb5.conf of this JVM at the KDC's krb5.conf

        File keytab = new File(dir, "hdfs.keytab");
        File clientKeytab = new File(dir, "client.keytab");
        keytab.delete();
        clientKeytab.delete();
        kdc.createPrincipal(keytab, "hdfs/localhost", "HTTP/localhost");
        kdc.createPrincipal(clientKeytab, args[3]);

        // Before any Hadoop class asks who the current user is: a UGI first made with "simple" stays simple.
        Configuration security = new Configuration(false);
        security.set("hadoop.security.authentication", "kerberos");
        UserGroupInformation.setConfiguration(security);

        MiniDFSClusterManager.main(Arrays.copyOfRange(args, 5, args.length));
    }
}
