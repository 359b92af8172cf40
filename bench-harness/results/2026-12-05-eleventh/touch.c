#include <sys/mman.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){size_t n=(size_t)atoi(argv[1])<<30; int huge=atoi(argv[2]);
for(int pass=0;pass<3;pass++){
 char*p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 if(huge) madvise(p,n,MADV_HUGEPAGE); else madvise(p,n,MADV_NOHUGEPAGE);
 double t=now(),c=cpu(); for(size_t i=0;i<n;i+=4096)p[i]=1; double t1=now(),c1=cpu();
 memset(p,2,n); double t2=now();
 printf("pass %d huge %d: touch %.3f s wall %.3f s cpu per GiB; memset after %.3f s/GiB\n",pass,huge,(t1-t)/(n>>30),(c1-c)/(n>>30),(t2-t1)/(n>>30));
 munmap(p,n);}
}
