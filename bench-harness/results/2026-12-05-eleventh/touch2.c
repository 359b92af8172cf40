#include <sys/mman.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){size_t chunk=(size_t)atoi(argv[1])<<10; int mode=atoi(argv[2]); size_t total=1UL<<30;
 for(int pass=0;pass<3;pass++){
 double t=now(); char**ps=malloc(sizeof(char*)*(total/chunk));
 for(size_t k=0;k<total/chunk;k++){
  char*p=mmap(0,chunk,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|(mode==1?MAP_POPULATE:0),-1,0);
  if(mode==2) madvise(p,chunk,MADV_POPULATE_WRITE);
  for(size_t i=0;i<chunk;i+=4096)p[i]=1;
  ps[k]=p;}
 double t1=now();
 for(size_t k=0;k<total/chunk;k++) munmap(ps[k],chunk);
 printf("chunk %zu KiB mode %d pass %d: %.3f s/GiB\n",chunk>>10,mode,pass,t1-t);}
}
